"""Names as Kubernetes accepts them (`preemption.names`): upstream's DNS-1123 rules.

Scenarios:
- a DNS-1123 label: upstream's good and bad values (`TestIsDNS1123Label`), 63 characters
  at most; a valid subdomain that is not a label is told it must not contain dots;
- a DNS-1123 subdomain: upstream's good and bad values (`TestIsDNS1123Subdomain`), 253
  characters at most, counted in UTF-8 bytes as Go counts;
- the names that would steer a URL path (`..`, `.`, `a/b`, `%2e%2e`, a trailing newline,
  an ESC sequence) are refused as pod names and as namespaces;
- the messages are upstream's, word for word (`RegexError`'s spacing, `MaxLenError`);
- a namespace is checked as a label, a pod, node or pod group name as a subdomain;
- `name_problem` is one line naming the kind and the name (escaped, cut to 80 characters),
  `pod_key_problem` tells the namespace's problem first, `valid_name` returns a valid name
  and raises `InvalidName` (a ValueError) with that line for another.
"""

from __future__ import annotations

import pytest

from preemptctl.preemption.names import (
    InvalidName,
    NameKind,
    is_dns1123_label,
    is_dns1123_subdomain,
    name_problem,
    pod_key_problem,
    shown,
    valid_name,
)

LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)

GOOD_LABELS = ["a", "ab", "abc", "a1", "a-1", "a--1--2--b", "0", "01", "012", "1a", "1-a"]
GOOD_LABELS += ["1--a--b--2", "a" * 63]
BAD_LABELS = ["", "A", "ABC", "aBc", "A1", "A-1", "1-A", "-", "a-", "-a", "1-", "-1", "_"]
BAD_LABELS += ["a_", "_a", "a_b", "1_", "_1", "1_2", ".", "a.", ".a", "1.", ".1", " ", "a "]
BAD_LABELS += [" a", "a b", "1 ", " 1", "1 2", "a" * 64]

GOOD_SUBDOMAINS = [*GOOD_LABELS, "a.a", "ab.a", "abc.a", "a1.a", "a-1.a", "a--1--2--b.a"]
GOOD_SUBDOMAINS += ["a.1", "0.a", "1-a.1", "a.b.c.d.e", "aa.bb.cc.dd.ee", "1.2.3.4.5"]
GOOD_SUBDOMAINS += ["11.22.33.44.55", "a" * 253]
BAD_SUBDOMAINS = ["", "A", "ABC", "aBc", "A1", "A-1", "1-A", "-", "a-", "-a", "1-", "-1"]
BAD_SUBDOMAINS += ["_", "a_", "_a", "a_b", "1_", "_1", "1_2", ".", "a.", ".a", "a..b", "1."]
BAD_SUBDOMAINS += [".1", "1..2", " ", "a ", " a", "a b", "A.a", "aB.a", "ab.A", "A1.a"]
BAD_SUBDOMAINS += ["a@b", "a,b", "a;b", "a:b", "a%b", "a?b", "a$b", "a" * 254]

STEERING = ["..", ".", "a/b", "%2e%2e", "a\n", "ok\x1b]0;owned\x07", "../default", "a/../b"]


@pytest.mark.parametrize("value", GOOD_LABELS)
def test_upstreams_good_labels_are_labels(value: str) -> None:
    assert is_dns1123_label(value) == []


@pytest.mark.parametrize("value", BAD_LABELS)
def test_upstreams_bad_labels_are_refused(value: str) -> None:
    assert is_dns1123_label(value) != []


@pytest.mark.parametrize("value", GOOD_SUBDOMAINS)
def test_upstreams_good_subdomains_are_subdomains(value: str) -> None:
    assert is_dns1123_subdomain(value) == []


@pytest.mark.parametrize("value", BAD_SUBDOMAINS)
def test_upstreams_bad_subdomains_are_refused(value: str) -> None:
    assert is_dns1123_subdomain(value) != []


@pytest.mark.parametrize("value", STEERING)
def test_names_that_would_steer_a_path_are_neither_pod_names_nor_namespaces(value: str) -> None:
    assert NameKind.POD.errors(value) != []
    assert NameKind.NAMESPACE.errors(value) != []


def test_a_labels_messages_are_upstreams() -> None:
    assert is_dns1123_label("Web") == [LABEL_MESSAGE]
    assert is_dns1123_label("a.b") == ["must not contain dots"]
    assert is_dns1123_label("a" * 64) == ["must be no more than 63 characters"]


def test_a_subdomains_messages_are_upstreams() -> None:
    assert is_dns1123_subdomain("..") == [SUBDOMAIN_MESSAGE]
    assert is_dns1123_subdomain("a" * 254) == ["must be no more than 253 characters"]
    assert is_dns1123_subdomain("-" * 254) == [
        "must be no more than 253 characters",
        SUBDOMAIN_MESSAGE,
    ]


def test_length_is_counted_in_utf8_bytes_as_go_counts() -> None:
    # 62 ASCII + one 2-byte character: 63 characters, 64 bytes.
    assert "must be no more than 63 characters" in is_dns1123_label("a" * 62 + "é")


def test_each_kind_is_checked_by_the_api_servers_rule() -> None:
    dotted = "web.example"
    assert NameKind.NAMESPACE.errors(dotted) == ["must not contain dots"]
    assert NameKind.POD.errors(dotted) == []
    assert NameKind.NODE.errors(dotted) == []
    assert NameKind.POD_GROUP.errors(dotted) == []


def test_a_problem_is_one_line_naming_the_kind_and_the_name() -> None:
    assert name_problem(NameKind.POD, "..") == f"pod name '..' is not valid: {SUBDOMAIN_MESSAGE}"
    assert name_problem(NameKind.POD, "web-1") is None


def test_a_name_is_shown_escaped_and_cut() -> None:
    assert shown("ok\x1b]0;owned\x07") == "'ok\\x1b]0;owned\\x07'"
    assert shown("a" * 100) == "'" + "a" * 80 + "'..."
    problem = name_problem(NameKind.NODE, "n\x1b[2J" + "x" * 300)
    assert problem is not None and "\x1b" not in problem
    assert problem.startswith("node name 'n\\x1b[2J" + "x" * 75 + "'... is not valid: ")


def test_a_pod_keys_namespace_is_told_first() -> None:
    assert pod_key_problem("Prod", "..") == f"namespace 'Prod' is not valid: {LABEL_MESSAGE}"
    assert pod_key_problem("prod", "..") == f"pod name '..' is not valid: {SUBDOMAIN_MESSAGE}"
    assert pod_key_problem("prod", "web-1") is None


def test_valid_name_returns_a_valid_name_and_refuses_another() -> None:
    assert valid_name(NameKind.POD, "web-1") == "web-1"
    with pytest.raises(InvalidName) as refused:
        valid_name(NameKind.POD, "a/b")
    assert isinstance(refused.value, ValueError)
    assert str(refused.value) == f"pod name 'a/b' is not valid: {SUBDOMAIN_MESSAGE}"
    assert (refused.value.kind, refused.value.value) == (NameKind.POD, "a/b")
