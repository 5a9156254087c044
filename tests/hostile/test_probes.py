"""Slow clients do not hold the kubelet's probes (issue 20, finding 3).

Scenario: one `preemptctl worker` on a quiet cluster, its metrics port and its probe port
(`PREEMPT_PROBE_PORT`) on 127.0.0.1. Any pod can reach both (the Service publishes the pod
IPs; the NetworkPolicy admits anyone to the probe port). Two attacks in turn, each held
for longer than the server's deadline for a whole request while the kubelet probes as it
does (a fresh connection, `GET`, read to the end, within the deployment's
`timeoutSeconds`, 3 s):

- the issue's: 16 connections from one address, each dripping one byte every 5 s into a
  request to the metrics port, reopened as soon as the server drops one;
- on the probe port itself: 64 connections from 16 addresses, a byte every 0.5 s.

Judged from outside (the probe answers and the attackers' sockets):
- under each attack, every `/healthz` and every `/readyz` on the probe port is answered
  200 within the timeout;
- under the issue's attack, `/healthz` on the metrics port itself (where the probes were
  answered before they had a port of their own) is answered 200 within the timeout too;
- each attack was live while the probes ran: all its connections were opened.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.emulator import as_list, node
from tests.support.hostile_rig import hostile_rig
from tests.support.slow_clients import Answer, SlowClients, probe
from tests.support.temporal_server import PersistentTemporal

KUBELET_TIMEOUT = 3.0  # deploy/base/deployment.yaml: every probe's timeoutSeconds
ROUNDS = 4
# ROUNDS x ROUND_SECONDS outlasts the server's deadline for a whole request (2 s), so the
# attackers it drops come back while the probes still run.
ROUND_SECONDS = 0.6
SETTLE_SECONDS = 0.5  # the attackers hold their connections before the first probe


@dataclass(frozen=True)
class Attack:
    name: str
    target: str  # "metrics" or "probes"
    clients: int
    addresses: int
    interval: float


ATTACKS = (
    Attack("16 clients, 1 address, 1 B/5 s, metrics port", "metrics", 16, 1, 5.0),
    Attack("64 clients, 16 addresses, 1 B/0.5 s, probe port", "probes", 64, 16, 0.5),
)


@dataclass
class Under:
    answers: list[tuple[str, Answer]]  # the kubelet's probes, on the probe port
    old_port: list[Answer]  # /healthz on the metrics port, where probes were answered before
    opened: int


@pytest.fixture(scope="module")
def under_attack(
    persistent_temporal: PersistentTemporal, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Under]]:
    found: dict[str, Under] = {}
    work = tmp_path_factory.mktemp("probes")
    with hostile_rig(persistent_temporal, work, as_list(node("node-0"))) as rig:
        ports = {"metrics": rig.worker.metrics_port, "probes": rig.worker.kubelet_port}
        for attack in ATTACKS:
            sources = [f"127.0.0.{2 + k}" for k in range(attack.addresses)]
            with SlowClients(
                ports[attack.target], attack.clients, interval=attack.interval, sources=sources
            ) as attackers:
                time.sleep(SETTLE_SECONDS)  # the attack's set-up, not an assertion about time
                answers, old_port = [], []
                for _ in range(ROUNDS):
                    began = time.monotonic()
                    for path in ("/healthz", "/readyz"):
                        answers.append(
                            (path, probe(ports["probes"], path, timeout=KUBELET_TIMEOUT))
                        )
                    old_port.append(probe(ports["metrics"], "/healthz", timeout=KUBELET_TIMEOUT))
                    time.sleep(max(0.0, ROUND_SECONDS - (time.monotonic() - began)))
                found[attack.name] = Under(answers, old_port, attackers.opened)
        yield found


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.target for a in ATTACKS])
def test_every_probe_is_answered_ok_within_the_kubelets_timeout(
    under_attack: dict[str, Under], attack: Attack
) -> None:
    answers = under_attack[attack.name].answers
    failed = [
        f"{path}: {answer.status or answer.body} after {answer.seconds:.2f}s"
        for path, answer in answers
        if answer.status != 200
    ]
    assert (len(answers), failed) == (2 * ROUNDS, [])


def test_the_metrics_port_still_answers_a_probe_under_the_issues_attack(
    under_attack: dict[str, Under],
) -> None:
    """For anything that still probes there (the metrics port answers /healthz too): the
    slow clients' connections are dropped to make room, not held."""
    answers = under_attack[ATTACKS[0].name].old_port
    failed = [f"{a.status or a.body} after {a.seconds:.2f}s" for a in answers if a.status != 200]
    assert (len(answers), failed) == (ROUNDS, [])


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.target for a in ATTACKS])
def test_the_attack_held_its_connections(under_attack: dict[str, Under], attack: Attack) -> None:
    assert under_attack[attack.name].opened >= attack.clients
