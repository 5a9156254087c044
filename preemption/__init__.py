"""The pure core: Kubernetes object views, quantities, fit filters and the preemption planners.

Plain data in, plain data out. Nothing here performs I/O or imports Temporal, the
Kubernetes client or SQLAlchemy, so a decision can be reproduced from a snapshot alone.
"""
