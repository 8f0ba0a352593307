"""Hostile and careless input to `doctor` on Kubernetes: a kubeconfig that is an alias bomb, nested too
deep, written twice over or too large, and an API server that answers a byte at a time or not at all.
Each is refused with one paragraph naming the file, or the server, the request and the deadline; the
bomb with bounded memory, the slow servers long before their answer would end."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ops import kube_api
from tests.support.api_server import api_server, json_page, pki, silent_server, trickle
from tests.support.kubernetes import ROOT, with_keys

MEMORY = 1 << 30
"""Address space of the child `doctor` reading the bomb: several times what it needs, far below the
gigabytes the bomb's value takes once expanded (1.5 GB as the issue measured it)."""
DEADLINE = 2.0
HANG_GUARD = 60.0
"""Not a timing to meet: a client without a deadline reads a trickle for `TRICKLE_SECONDS` (120 s)."""
PAGE = b'{"items": [], "metadata": {}}' + b" " * 600
"""An empty page, long enough that trickled over `TRICKLE_SECONDS` each byte comes well within the
deadline: only a bound on the whole answer ends its read, not a read timeout."""


def bomb(levels: int = 8) -> str:
    """A billion laughs as a kubeconfig: 9**levels strings once the aliases are followed, in 500 bytes."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines + [f"current-context: *l{levels}"]) + "\n"


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def test_doctor_refuses_an_alias_bomb_kubeconfig_in_one_paragraph_within_bounded_memory(tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(bomb())
    assert config.stat().st_size < 600
    stack = with_keys(tmp_path, "prod", "  ascend-fleet:target: kubernetes\n")
    done = subprocess.run(
        [sys.executable, "-m", "allocation", "doctor", "--config", str(stack), "--kubeconfig", str(config)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, preexec_fn=_limited,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    message = done.stderr.strip()
    assert f"kubeconfig {config} cannot be read as YAML" in message and "an alias bomb" in message, message
    assert "\n" not in message and "bug" not in message and "MemoryError" not in message


@pytest.mark.parametrize(
    "data, said",
    [
        (b"current-context: " + b"{a: " * 100 + b"x" + b"}" * 100 + b"\n", ", line 1: nested more than 64 levels deep"),
        (b"current-context: " + b"[" * 5000 + b"]" * 5000 + b"\n", " cannot be read as YAML: while increasing flow level exceeded maximum nesting depth"),
        (b"current-context: a\ncurrent-context: b\n", " cannot be read as YAML: while constructing a mapping in "
         '"<unicode string>", line 1, column 1 found duplicate key \'current-context\''),
        (b"current-context: \xff\n", " is not UTF-8 text (byte 0xff at offset 17)"),
    ],
    ids=["100-deep", "5000-deep", "key-twice", "not-utf8"],
)
def test_a_kubeconfig_nested_too_deep_or_with_a_key_twice_is_refused_naming_the_file(tmp_path, data, said):
    path = tmp_path / "kubeconfig"
    path.write_bytes(data)
    with pytest.raises(kube_api.KubeError) as refused:
        kube_api.load_access(path)
    assert f"kubeconfig {path}{said}" in str(refused.value) and "\n" not in str(refused.value)


def test_a_kubeconfig_larger_than_the_bound_is_refused_by_its_size_before_it_is_read(tmp_path):
    path = tmp_path / "kubeconfig"
    with path.open("wb") as f:
        f.truncate(1 << 33)  # 8 GiB, sparse: nothing to read but zeros
    with pytest.raises(kube_api.KubeError) as refused:
        kube_api.load_access(path)
    assert f"kubeconfig {path} is larger than {kube_api.KUBECONFIG_LIMIT} bytes" in str(refused.value)
    assert f"(it is {1 << 33} bytes)" in str(refused.value)


@pytest.fixture(scope="module")
def lane_pki(tmp_path_factory) -> Path:
    return pki(tmp_path_factory.mktemp("api") / "pki")


def _refused_late(config: Path) -> str:
    """The refusal of one GET with a DEADLINE-second deadline; fails if the GET ends otherwise."""
    access = kube_api.load_access(config)
    started = time.monotonic()
    with pytest.raises(kube_api.KubeError) as refused:
        kube_api.get(access, "/api/v1/pods", {"limit": "500"}, deadline=DEADLINE)
    assert time.monotonic() - started < HANG_GUARD
    message = str(refused.value)
    assert message.startswith("GET /api/v1/pods: the API server https://127.0.0.1:") and "\n" not in message
    assert f"did not finish its answer within {DEADLINE:g} s" in message
    return message


def _slow_body(handler, path, query) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(PAGE)))
    handler.end_headers()
    trickle(handler, PAGE)


def _slow_headers(handler, path, query) -> None:
    handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
    trickle(handler, b"X-Slow: " + b"." * 600 + b"\r\n")
    handler.wfile.write(b"Content-Length: %d\r\n\r\n%s" % (len(PAGE), PAGE))


@pytest.mark.parametrize("answer", [_slow_body, _slow_headers], ids=["body", "headers"])
def test_an_api_server_that_trickles_its_answer_is_given_up_at_the_deadline(lane_pki, answer):
    with api_server(lane_pki, answer) as config:
        _refused_late(config)


def test_an_api_server_that_never_answers_the_tls_handshake_is_given_up_at_the_deadline(lane_pki):
    with silent_server(lane_pki) as config:
        _refused_late(config)


def test_an_api_server_that_answers_at_once_is_read_within_the_deadline(lane_pki):
    with api_server(lane_pki, lambda handler, path, query: json_page(handler, {"items": [1], "metadata": {}})) as config:
        assert kube_api.list_items(kube_api.load_access(config), "/api/v1/pods", deadline=DEADLINE) == [1]


def test_an_api_server_that_redirects_is_refused_and_the_token_goes_nowhere(lane_pki):
    """urllib follows a redirect with every header but the content ones: the bearer token would go
    to whatever host the answer names."""
    seen: list[str | None] = []

    def redirect(handler, path, query) -> None:
        if path == "/elsewhere":
            seen.append(handler.headers.get("Authorization"))
            json_page(handler, {"items": [], "metadata": {}})
            return
        handler.send_response(302)
        handler.send_header("Location", "/elsewhere")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    with api_server(lane_pki, redirect) as config:
        access = kube_api.load_access(config)
        with pytest.raises(kube_api.KubeError, match=r"^GET /api/v1/pods: the API server answered 302, a redirect to 'https://127\.0\.0\.1:\d+/elsewhere'; doctor follows no redirect"):
            kube_api.list_items(access, "/api/v1/pods", deadline=DEADLINE)
    assert seen == []
