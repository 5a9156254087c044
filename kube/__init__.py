"""The Kubernetes side of the controller: every cluster write (the gateway) and the
watch-fed cluster view.

Gateway modules, one concern each: `pods` (read a pod by name and UID), `conditions`
(DisruptionTarget), `deletion` (delete or evict a victim with a UID precondition),
`nomination` (nominatedNodeName), `events` (every event about a pod: the Preempted event on a
victim, what a preemptor is told). Each write returns a `WriteResult` or raises a classified
`KubeCallError` (`results`, `classify`), so an activity retried any number of times never
does harm; a lookup's `PodLookup` reads the pod for its callers, who never parse its JSON.
`client` builds the connection; `view` and `reflector` keep the planner's snapshot current.
"""
