"""The process that runs beside a cluster: CLI, configuration, Temporal worker, trigger loop."""
