"""Connecting to the API server.

Scenarios:
- an explicit kubeconfig path is used;
- without one, $KUBECONFIG is used;
- the transport never retries on its own: a dropped delete reaches the server once and
  surfaces as a retryable error, leaving retries to the workflow;
- a request reaches the API server as the official client would send it: its method, path,
  query (values that need escaping included), content type and JSON body; an error answer
  is the client's `ApiException` with the server's status and body;
- each request carries the kubeconfig's bearer token, as the official client would send it;
- the token is looked up at most once a second (the lookup is costly), so a token the
  configuration renews is sent from the next lookup on, and none is sent when there is none;
- every internal of the official client the gateway relies on (`CLIENT_INTERNALS`: the pool
  manager, `auth_settings`, `param_serialize`, ...) is on the installed client with the
  shape the gateway uses: each one a test that names what moved; the bearer token setting
  and `param_serialize`'s answer keep the shape the gateway reads;
- `connect` refuses a client that moved one, in one line naming it and the supported range;
- the kubernetes requirement has an upper bound, and the installed client is within it;
- a list page is parsed and its length in bytes told, declared (Content-Length) or streamed
  (chunked); a page longer than the most allowed is refused: unread when its length is
  declared, else read no further than one chunk past the most; the refused page's connection
  is not reused, so the next answer is read whole; without a most allowed a long page is read
  whole; an error answer is the client's `ApiException`.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
from collections.abc import Iterator
from importlib import metadata
from typing import Any

import orjson
import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from packaging.requirements import Requirement

from preemptctl.emulator import Emulator
from preemptctl.kube.classify import Call
from preemptctl.kube.client import (
    CLIENT_INTERNALS,
    LIST_READ_CHUNK,
    STRATEGIC_MERGE_PATCH,
    TOKEN_LOOKUP_SECONDS,
    BearerToken,
    Internal,
    KubeClient,
    PageTooLarge,
    UnsupportedClientError,
    connect,
    internal_problem,
)
from preemptctl.kube.deletion import delete_victim
from preemptctl.kube.results import Retryable
from preemptctl.preemption.decision import PodRef
from tests.support.emulator import pod


def test_explicit_kubeconfig_is_used(emulator: Emulator) -> None:
    kube = connect(emulator.kubeconfig_path)
    assert kube.api.configuration.host == emulator.base_url


def test_kubeconfig_env_is_used(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(emulator.kubeconfig_path))
    assert connect().api.configuration.host == emulator.base_url


def test_transport_does_not_retry_on_its_own(emulator: Emulator) -> None:
    emulator.faults.drop("delete", "pods")
    kube = connect(emulator.kubeconfig_path, read_timeout=1)
    with pytest.raises(Retryable):
        delete_victim(kube, PodRef("default", "web-1", "u1"))
    assert len(emulator.requests.matching("delete", "pods")) == 1


def test_requests_carry_the_bearer_token_the_official_client_would(emulator: Emulator) -> None:
    kube = connect(emulator.kubeconfig_path)
    official = kube.api.param_serialize(
        method="GET", resource_path="/api", header_params={}, auth_settings=["BearerToken"]
    )[2]
    assert kube._headers()["authorization"] == official["authorization"] == "Bearer emulator-token"


class _Configuration:
    """Stands in for the client's configuration: counts lookups, token set by the test."""

    def __init__(self) -> None:
        self.token: str | None = "Bearer one"
        self.lookups = 0

    def auth_settings(self) -> dict[str, Any]:
        self.lookups += 1
        if self.token is None:
            return {}
        value = {"type": "api_key", "in": "header", "key": "authorization", "value": self.token}
        return {"BearerToken": value}


def test_token_is_looked_up_at_most_once_a_second() -> None:
    now = [100.0]
    token = BearerToken(clock=lambda: now[0])
    configuration = _Configuration()
    assert token.header(configuration) == ("authorization", "Bearer one")
    configuration.token = "Bearer two"
    now[0] += TOKEN_LOOKUP_SECONDS / 2
    assert token.header(configuration) == ("authorization", "Bearer one")
    assert configuration.lookups == 1
    now[0] += TOKEN_LOOKUP_SECONDS
    assert token.header(configuration) == ("authorization", "Bearer two")
    configuration.token = None
    now[0] += TOKEN_LOOKUP_SECONDS
    assert token.header(configuration) is None
    assert configuration.lookups == 3


def test_a_request_reaches_the_server_as_sent(emulator: Emulator) -> None:
    emulator.load(pod("web-1"))
    kube = connect(emulator.kubeconfig_path)
    path = "/api/v1/namespaces/default/pods/web-1"
    body = {"metadata": {"labels": {"tier": "caf\u00e9 & more"}}}
    query = {"fieldManager": "a b/c=d&e", "dryRun": "All"}
    kube.request(
        "PATCH",
        path,
        Call("patch", "pods", "default/web-1"),
        body=body,
        query=query,
        content_type=STRATEGIC_MERGE_PATCH,
    )
    (sent,) = emulator.requests.matching("patch", "pods")
    assert (sent.method, sent.path, sent.query) == ("PATCH", path, query)
    assert (sent.content_type, sent.body) == (STRATEGIC_MERGE_PATCH, body)


def test_an_error_answer_is_the_clients_api_exception(emulator: Emulator) -> None:
    kube = connect(emulator.kubeconfig_path)
    with pytest.raises(ApiException) as raised:
        kube.send("GET", "/api/v1/namespaces/default/pods/no-such-pod")
    assert raised.value.status == 404
    assert orjson.loads(raised.value.body)["reason"] == "NotFound"


# -- the client's internals --------------------------------------------------------------------

CLIENT = metadata.version("kubernetes")


@pytest.mark.parametrize("internal", CLIENT_INTERNALS, ids=lambda internal: internal.path)
def test_each_client_internal_the_gateway_uses_is_on_the_installed_client(
    internal: Internal,
) -> None:
    problem = internal_problem(internal, k8s.ApiClient(k8s.Configuration()))
    assert problem is None, (
        f"kubernetes {CLIENT}: {problem}, which kube/client.py ({internal.used_by}) relies on: "
        "adapt the gateway to this client, or keep pyproject.toml's bound below it"
    )


def test_the_bearer_token_setting_keeps_the_shape_the_gateway_reads() -> None:
    configuration = k8s.Configuration(
        api_key={"authorization": "t0ken"}, api_key_prefix={"authorization": "Bearer"}
    )
    setting = configuration.auth_settings().get("BearerToken")
    assert setting == {
        "type": "api_key",
        "in": "header",
        "key": "authorization",
        "value": "Bearer t0ken",
    }, f"kubernetes {CLIENT}: Configuration.auth_settings() changed shape: {setting}"


def test_param_serialize_answers_what_call_api_takes() -> None:
    api = k8s.ApiClient(k8s.Configuration(host="https://api.example:6443"))
    serialized = api.param_serialize(
        method="GET",
        resource_path="/api/v1/pods",
        query_params=[("watch", "true")],
        header_params={"Accept": "application/json"},
    )
    method, url, headers, body, post_params = serialized
    assert (method, url, body, post_params) == (
        "GET",
        "https://api.example:6443/api/v1/pods?watch=true",
        None,
        None,
    ), f"kubernetes {CLIENT}: ApiClient.param_serialize changed its answer: {serialized}"
    assert headers["Accept"] == "application/json"


def test_connect_refuses_a_client_that_moved_an_internal(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(k8s.ApiClient, "param_serialize")
    with pytest.raises(UnsupportedClientError) as raised:
        connect(emulator.kubeconfig_path)
    assert str(raised.value) == (
        f"the installed kubernetes client {CLIENT} lacks what the gateway uses "
        "(api.param_serialize is gone): install kubernetes<38,>=37"
    )


def test_a_moved_parameter_is_named() -> None:
    internal = Internal("api.call_api", ("_request_timeout", "_timeout"))
    problem = internal_problem(internal, k8s.ApiClient(k8s.Configuration()))
    assert problem == "api.call_api takes no _timeout"


def test_the_kubernetes_requirement_is_bounded_and_the_installed_client_within_it() -> None:
    (declared,) = [
        Requirement(line)
        for line in metadata.requires("preemptctl") or []
        if Requirement(line).name == "kubernetes"
    ]
    assert any(spec.operator in ("<", "<=", "~=", "==") for spec in declared.specifier), (
        f"{declared} has no upper bound: a client release could move the internals unseen"
    )
    assert declared.specifier.contains(CLIENT), f"kubernetes {CLIENT} is outside {declared}"


# -- list pages --------------------------------------------------------------------------------

LIST_HEAD = b'{"metadata":{"resourceVersion":"7"},"items":[{"blob":"'
LIST_TAIL = b'"}]}'


def list_body(length: int) -> bytes:
    """A list page's JSON of exactly `length` bytes."""
    return LIST_HEAD + b"x" * (length - len(LIST_HEAD) - len(LIST_TAIL)) + LIST_TAIL


SLOW_BODY = 0.5  # seconds: the next request is sent well before the refused body arrives


class _Pages(http.server.BaseHTTPRequestHandler):
    """`/declared/N`: a list page of N bytes with its Content-Length; `/chunked/N`: the same,
    streamed in chunks of 64 KiB without one (as the API server streams a long list);
    `/slow/N`: declared, the body sent `SLOW_BODY` seconds after the headers; `/gone`: 410,
    as for an expired continue token."""

    protocol_version = "HTTP/1.1"  # keep-alive: the next request may reuse the connection

    def handle(self) -> None:
        with contextlib.suppress(ConnectionResetError):  # a page dropped with the rest unread
            super().handle()

    def do_GET(self) -> None:
        _, mode, *length = self.path.split("?")[0].split("/")
        if mode == "gone":
            status = b'{"kind":"Status","code":410,"reason":"Expired","message":"too old"}'
            self.send_response(410)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(status)))
            self.end_headers()
            self.wfile.write(status)
            return
        body = list_body(int(length[0]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        try:
            if mode in ("declared", "slow"):
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if mode == "slow":
                    self.wfile.flush()
                    time.sleep(SLOW_BODY)
                self.wfile.write(body)
                return
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, len(body), 64 << 10):
                chunk = body[start : start + (64 << 10)]
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the reader gave up on the page

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def pages() -> Iterator[KubeClient]:
    """A client of a server answering list pages of any length, declared or streamed."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    configuration = k8s.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    configuration.retries = False
    api = k8s.ApiClient(configuration)
    try:
        yield KubeClient(api, connect_timeout=2, read_timeout=5)
    finally:
        api.close()
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.parametrize("mode", ["declared", "chunked"])
def test_a_list_page_is_parsed_and_its_length_told(pages: KubeClient, mode: str) -> None:
    page = pages.read_list(f"/{mode}/200000", {"limit": "500"}, max_bytes=300_000)
    assert page.size == 200_000
    assert page.body == orjson.loads(list_body(200_000))


def test_a_page_declared_longer_than_allowed_is_refused_unread(pages: KubeClient) -> None:
    with pytest.raises(PageTooLarge) as refused:
        pages.read_list("/declared/3000000", {"limit": "500"}, max_bytes=1_000_000)
    assert (refused.value.read, refused.value.declared) == (0, 3_000_000)
    assert str(refused.value) == (
        "a list page of 3000000 bytes declared, more than the 1000000 allowed"
    )


def test_a_streamed_page_is_read_no_further_than_one_chunk_past_the_most_allowed(
    pages: KubeClient,
) -> None:
    with pytest.raises(PageTooLarge) as refused:
        pages.read_list("/chunked/8000000", {"limit": "500"}, max_bytes=1_000_000)
    assert refused.value.declared is None
    assert 1_000_000 < refused.value.read <= 1_000_000 + LIST_READ_CHUNK


@pytest.mark.parametrize("mode", ["declared", "chunked", "slow"])
def test_after_a_refused_page_the_next_answer_is_read_whole(pages: KubeClient, mode: str) -> None:
    """The refused page's connection is closed, not handed back with the rest on it: a body
    still on its way (`slow`) would be read as the next answer."""
    with pytest.raises(PageTooLarge):
        pages.read_list(f"/{mode}/3000000", {"limit": "500"}, max_bytes=1_000_000)
    page = pages.read_list(f"/{mode}/5000", {"limit": "5"}, max_bytes=1_000_000)
    assert page.body == orjson.loads(list_body(5000))


@pytest.mark.parametrize("mode", ["declared", "chunked"])
def test_without_a_most_allowed_a_long_page_is_read_whole(pages: KubeClient, mode: str) -> None:
    page = pages.read_list(f"/{mode}/3000000", {"limit": "1"})
    assert page.size == 3_000_000


def test_a_list_error_answer_is_the_clients_api_exception(pages: KubeClient) -> None:
    with pytest.raises(ApiException) as raised:
        pages.read_list("/gone", {"limit": "500", "continue": "old"}, max_bytes=1_000_000)
    assert raised.value.status == 410
