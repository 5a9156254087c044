"""Which version of an API the API server serves, for the kinds not every cluster has.

kube-scheduler's workload API moves between releases: Kubernetes 1.36 serves PodGroups (and
Workloads) at `scheduling.k8s.io/v1alpha2`, 1.37 at `v1beta1` (v1alpha2 removed), and
CompositePodGroups, behind their own gate, at `v1alpha3`; 1.35 had only the first alpha
(`v1alpha1`: a Workload holding its pod groups, which pods named with `spec.workloadRef`).
The planner reads some of these shapes (`preemption.decode`); `discover` asks the API server
(`/apis/<group>`, then `/apis/<group>/<version>`) which of them it serves, preferring the
newest, and names the versions of the group it serves but the planner does not read (an
older alpha shape), so the cluster view can say so. `served` keeps each answer on the
client: a cluster that starts serving a version later is seen after a restart, as the view
sees it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException

from preemptctl.kube.client import KubeClient

SCHEDULING = "scheduling.k8s.io"
# The versions whose shape the planner reads, newest first.
POD_GROUP_VERSIONS = ("v1beta1", "v1alpha2")
COMPOSITE_POD_GROUP_VERSIONS = ("v1alpha3",)
# What an older alpha shape of the workload API serves besides (1.35: Workloads only).
POD_GROUP_RELATED = frozenset({"workloads"})


@dataclass(frozen=True)
class Served:
    """Where the API server serves `resource` of `group`, among the `versions` read."""

    group: str
    resource: str
    versions: tuple[str, ...]  # what the planner reads, newest first
    version: str = ""  # the newest of them the server serves; "" for none
    unread: tuple[str, ...] = ()  # other versions of the group with a related resource

    @property
    def path(self) -> str:
        """The all-namespaces collection path at the served version."""
        return f"/apis/{self.group}/{self.version}/{self.resource}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def absent(self) -> str:
        """One line for a cluster that serves none of the versions read."""
        looked = ", ".join(f"{self.group}/{version}" for version in self.versions)
        line = (
            f"this cluster does not serve {self.resource} at a version preemptctl reads ({looked})"
        )
        if self.unread:
            older = ", ".join(f"{self.group}/{version}" for version in self.unread)
            line += f"; it serves {older}, an older alpha shape preemptctl does not read"
        return line


def discover(
    kube: KubeClient,
    group: str,
    resource: str,
    versions: tuple[str, ...],
    related: Collection[str] = (),
) -> Served:
    """Ask the API server which of `versions` (newest first) serves `resource`: the first
    that does is the one read. A group or version the server does not serve answers 404;
    any other failure is raised (the caller retries). `unread` names the group's other
    versions that serve `resource` or a `related` resource (best effort: a version that
    cannot be read is left out)."""
    found = Served(group, resource, versions)
    try:
        document = kube.send("GET", f"/apis/{group}")
    except ApiException as error:
        if error.status == 404:  # the whole group is not served
            return found
        raise
    listed = document.get("versions") if isinstance(document, dict) else None
    offered: list[str] = [
        entry["version"]
        for entry in listed or ()
        if isinstance(entry, dict) and isinstance(entry.get("version"), str)
    ]
    for version in versions:
        if version in offered and resource in _resources(kube, group, version):
            return Served(group, resource, versions, version)
    unread: list[str] = []
    for version in offered:
        if version in versions:
            continue
        try:
            served_here = _resources(kube, group, version)
        except Exception:  # best effort: only a log line reads it
            continue
        if served_here & ({resource} | set(related)):
            unread.append(version)
    return Served(group, resource, versions, unread=tuple(unread))


def _resources(kube: KubeClient, group: str, version: str) -> set[str]:
    """The resource names `/apis/<group>/<version>` lists (none when it answers 404)."""
    try:
        document = kube.send("GET", f"/apis/{group}/{version}")
    except ApiException as error:
        if error.status == 404:
            return set()
        raise
    resources = document.get("resources") if isinstance(document, dict) else None
    return {
        entry["name"]
        for entry in resources or ()
        if isinstance(entry, dict) and isinstance(entry.get("name"), str)
    }


def served(
    kube: KubeClient,
    group: str,
    resource: str,
    versions: tuple[str, ...],
    related: Collection[str] = (),
) -> Served:
    """`discover`, asked once per client (its answer kept on the client)."""
    key = (group, resource, versions)
    found: Served | None = kube.served.get(key)
    if found is None:
        found = kube.served[key] = discover(kube, group, resource, versions, related)
    return found
