"""The decision path: the service that turns a preemptor into a decision written ahead.

Between the activities (which adapt Temporal to it) and the Kubernetes side, the ledger and
the pure domain (which it coordinates).
"""
