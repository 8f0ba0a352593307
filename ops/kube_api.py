"""Read a Kubernetes cluster's API for `doctor`: the kubeconfig, and bounded GETs of object lists.

No Kubernetes client library is installed in the project's environment, so this is the standard
library's HTTPS (`urllib.request`, `ssl`) with what a kubeconfig names (kubernetes.io/docs/concepts/
configuration/organize-cluster-access-kubeconfig/): the current context's cluster `server`,
`certificate-authority` or `-data`, and the user's `client-certificate`/`client-key` (files or
`-data`) or `token`. Relative paths are relative to the kubeconfig's folder, as kubectl reads them.
Exec and auth-provider plugins, and `insecure-skip-tls-verify`, are refused with the reason. The
kubeconfig itself is read with a stack file's bounds (`cli.yaml12`: no alias bomb, no deep nesting).

Everything the cluster answers is text nobody here controls: each response is read up to `LIMIT`
bytes (one more tells a cut body, which is refused, not parsed) within `DEADLINE` seconds however slowly
it comes (`ops.deadline`), parsed by `ops.bounded_json`, and
lists are paged (`limit`/`continue`, kubernetes.io/docs/reference/using-api/api-concepts/
#retrieving-large-results-sets-in-chunks) up to `MAX_PAGES`.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import os
import ssl
import stat
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli import yaml12
from ops.bounded_json import JsonError, excerpt, loads
from ops.deadline import Deadline, Https

LIMIT = 32 * 1024 * 1024
"""Bytes read of one response: far above a page of `PAGE` pods."""
PAGE = 500
MAX_PAGES = 200
KUBECONFIG_LIMIT = 1024 * 1024
TIMEOUT = 30.0
"""Seconds of one connect or read."""
DEADLINE = 60.0
"""Seconds of one whole answer, from the connection to its last byte: `LIMIT` bytes at a few MB/s."""


class KubeError(Exception):
    """The kubeconfig cannot be used, or the API cannot be read; the message says which and why."""


@dataclass(frozen=True)
class Access:
    """How to reach one API server: its URL, the TLS context (CA and client certificate), a token."""

    server: str
    context: ssl.SSLContext
    token: str | None = None


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise KubeError(f"{what} is not a mapping")
    return value


def _named(items: Any, name: Any, key: str, path: Path) -> dict[str, Any]:
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("name") == name:
            return _mapping(item.get(key), f"kubeconfig {path}: {key} {name}")
    raise KubeError(f"kubeconfig {path}: no {key} named {excerpt(str(name))}")


def _pem(entry: dict[str, Any], key: str, base: Path, path: Path) -> bytes | None:
    """The PEM of `key` (a file) or `key-data` (base64), or None when neither is set."""
    data, file = entry.get(f"{key}-data"), entry.get(key)
    try:
        if isinstance(data, str):
            return base64.b64decode(data, validate=True)
        if isinstance(file, str):
            return (base / file).read_bytes()
    except (binascii.Error, ValueError):
        raise KubeError(f"kubeconfig {path}: {key}-data is not base64") from None
    except OSError as exc:
        raise KubeError(f"kubeconfig {path}: cannot read {key} {file}: {exc.strerror}") from None
    return None


def _tls(cluster: dict[str, Any], user: dict[str, Any], base: Path, path: Path) -> ssl.SSLContext:
    ca = _pem(cluster, "certificate-authority", base, path)
    context = ssl.create_default_context(cadata=ca.decode("ascii", errors="replace") if ca else None)
    cert, key = _pem(user, "client-certificate", base, path), _pem(user, "client-key", base, path)
    if cert is not None and key is not None:
        # ssl loads a client certificate from files only: written for the call, 0600, then removed.
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "c.pem").write_bytes(cert)
            (Path(tmp) / "k.pem").write_bytes(key)
            try:
                context.load_cert_chain(str(Path(tmp) / "c.pem"), str(Path(tmp) / "k.pem"))
            except ssl.SSLError as exc:
                raise KubeError(f"kubeconfig {path}: the client certificate and key do not load ({exc.reason})") from None
    return context


def kubeconfig_path(option: str | None) -> Path:
    """--kubeconfig, else the first file of $KUBECONFIG, else ~/.kube/config."""
    if option:
        return Path(option)
    env = os.environ.get("KUBECONFIG", "")
    first = next((p for p in env.split(os.pathsep) if p), None)
    return Path(first) if first else Path.home() / ".kube" / "config"


def _kubeconfig_text(path: Path) -> str:
    """The kubeconfig's text, at most KUBECONFIG_LIMIT bytes: a regular file's size is checked before
    anything is read, and anything else (`<(...)`, a device) is read up to one byte past the limit."""
    too_large = f"kubeconfig {path} is larger than {KUBECONFIG_LIMIT} bytes, more than any kubeconfig doctor reads"
    try:
        with path.open("rb") as f:
            st = os.fstat(f.fileno())
            if stat.S_ISREG(st.st_mode) and st.st_size > KUBECONFIG_LIMIT:
                raise KubeError(f"{too_large} (it is {st.st_size} bytes): give the cluster's kubeconfig")
            raw = f.read(KUBECONFIG_LIMIT + 1)
    except OSError as exc:
        raise KubeError(f"cannot read the kubeconfig {path}: {exc.strerror} (set --kubeconfig or KUBECONFIG)") from None
    if len(raw) > KUBECONFIG_LIMIT:
        raise KubeError(too_large)
    return raw.decode("utf-8-sig")


def _kubeconfig(path: Path) -> dict[str, Any]:
    """The kubeconfig as YAML values, read as stack files are (`cli.yaml12`): an alias bomb, values nested
    past `yaml12.MAX_DEPTH` and keys written twice are refused before anything is built from them."""
    try:
        return _mapping(yaml12.load_other(_kubeconfig_text(path)), f"kubeconfig {path}")
    except yaml12.Located as exc:
        raise KubeError(f"kubeconfig {path}, line {exc.line}: {exc.problem}") from None
    except UnicodeDecodeError as exc:
        raise KubeError(f"kubeconfig {path} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})") from None
    except (yaml12.YAMLError, RecursionError, ValueError) as exc:  # ValueError: an integer of thousands of digits
        raise KubeError(f"kubeconfig {path} cannot be read as YAML: {' '.join(str(exc).split())[:300]}") from None


def load_access(path: Path) -> Access:
    """The current context of the kubeconfig at `path`, ready to connect; KubeError naming what is wrong."""
    config = _kubeconfig(path)
    context = _named(config.get("contexts"), config.get("current-context"), "context", path)
    cluster = _named(config.get("clusters"), context.get("cluster"), "cluster", path)
    user = _named(config.get("users"), context.get("user"), "user", path) if context.get("user") else {}
    for unsupported in ("exec", "auth-provider"):
        if unsupported in user:
            raise KubeError(f"kubeconfig {path}: doctor does not run `{unsupported}` credential plugins: use a client certificate or token")
    if cluster.get("insecure-skip-tls-verify"):
        raise KubeError(f"kubeconfig {path}: insecure-skip-tls-verify is set; doctor verifies the API server: give its CA")
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith("https://"):
        raise KubeError(f"kubeconfig {path}: the cluster's server must be an https:// URL, not {excerpt(str(server))}")
    token = user.get("token") if isinstance(user.get("token"), str) else None
    return Access(server.rstrip("/"), _tls(cluster, user, path.parent, path), token)


def _late(access: Access, path: str, seconds: float) -> KubeError:
    return KubeError(
        f"GET {path}: the API server {access.server} did not finish its answer within {seconds:g} s, the deadline "
        "of one answer however slowly it comes (a server or proxy sending a byte now and then): check that server "
        "and what lies between"
    )


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """An API server answers a GET of the API itself; urllib would follow a redirect to any host,
    plain http:// included, with the request's headers, the bearer token among them (CPython
    `urllib/request.py` `HTTPRedirectHandler.redirect_request` keeps every header but the content
    ones). So a redirect is refused, naming where it pointed."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001, ANN201 (urllib's signature)
        raise KubeError(
            f"GET {urllib.parse.urlsplit(req.full_url).path}: the API server answered {code}, a redirect to "
            f"{excerpt(newurl, 200)}; doctor follows no redirect, which would carry the kubeconfig's credentials "
            "elsewhere: give the API server's own address as the cluster's server"
        )


def get(access: Access, path: str, query: dict[str, str] | None = None, deadline: float = DEADLINE) -> Any:
    """One GET of the API, parsed with bounds; KubeError for a refusal, a cut body, bad JSON, or an answer
    not whole within `deadline` seconds of the connection (`ops.deadline`)."""
    url = access.server + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if access.token:
        request.add_header("Authorization", f"Bearer {access.token}")
    clock = Deadline(deadline)
    try:
        with urllib.request.build_opener(Https(access.context, clock), _NoRedirect).open(request, timeout=TIMEOUT) as response:
            body = response.read(LIMIT + 1)
    except urllib.error.HTTPError as err:
        detail = err.read(4096).decode("utf-8", errors="replace")
        raise KubeError(f"GET {path}: HTTP {err.code}: {excerpt(detail, 200)}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        if clock.expired:
            raise _late(access, path, deadline) from None
        raise KubeError(f"GET {path}: {getattr(exc, 'reason', exc)}") from None
    finally:
        clock.close()
    if clock.expired:  # the body read may have ended at the shutdown, short
        raise _late(access, path, deadline)
    if len(body) > LIMIT:
        raise KubeError(f"GET {path}: the answer is longer than {LIMIT} bytes")
    try:
        return loads(body, f"GET {path}")
    except JsonError as exc:
        raise KubeError(str(exc)) from None


def list_items(access: Access, path: str, query: dict[str, str] | None = None, deadline: float = DEADLINE) -> list[Any]:
    """Every item of a list, page by page (at most MAX_PAGES pages, each within `deadline` seconds)."""
    items: list[Any] = []
    token = ""
    for _ in range(MAX_PAGES):
        page = get(access, path, {**(query or {}), "limit": str(PAGE)} | ({"continue": token} if token else {}), deadline)
        if not isinstance(page, dict) or not isinstance(page.get("items"), list):
            raise KubeError(f"GET {path}: the answer is not a list of objects")
        items += page["items"]
        meta = page.get("metadata")
        token = meta.get("continue") if isinstance(meta, dict) and isinstance(meta.get("continue"), str) else ""
        if not token:
            return items
    raise KubeError(f"GET {path}: more than {MAX_PAGES} pages of {PAGE} objects")
