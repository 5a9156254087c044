"""Every side effect of a preemption: cluster reads and writes, ledger appends."""
