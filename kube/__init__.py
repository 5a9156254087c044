"""The Kubernetes side of the controller: every cluster write (the gateway) and the
watch-fed cluster view.

Gateway modules, one concern each: `pods` (read a pod by name and UID), `conditions`
(DisruptionTarget), `deletion` (delete or evict a victim with a UID precondition),
`nomination` (nominatedNodeName), `events` (the Preempted event). Each call returns a
`WriteOutcome` or raises a classified `KubeCallError` (`outcomes`, `classify`), so an activity
retried any number of times never does harm. `client` builds the connection; `view` and
`reflector` keep the planner's snapshot current.
"""
