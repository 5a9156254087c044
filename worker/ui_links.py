"""Links into the Temporal UI: the page of a run that tells its story.

A preemption's story (who preempted whom, why, how the run ended) is its run's User
Metadata: the summary and details the workflow sets. Temporal UI 2.54 (the one `preemptctl
dev` runs and docker-compose.yml pins) serves it at
`/namespaces/[namespace]/workflows/[workflow]/[run]/user-metadata`; the event history is one
tab away. Without a run ID the UI opens the workflow's latest run at its event history.

No imports beyond the standard library: `history` and `explain` print these links and must
start fast.
"""

from __future__ import annotations

from urllib.parse import quote

STORY_PAGE = "user-metadata"
"""The run's tab that tells its story (UI 2.54's route name for User Metadata)."""


def run_page(ui_url: str, namespace: str, workflow_id: str, run_id: str | None = None) -> str:
    """One run's story, or (no `run_id`) the workflow's page. `ui_url` is printed as given:
    mask its secrets first."""
    path = f"/namespaces/{quote(namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"
    if run_id:
        path += f"/{quote(run_id, safe='')}/{STORY_PAGE}"
    return ui_url.rstrip("/") + path
