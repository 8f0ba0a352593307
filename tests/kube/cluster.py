"""A real etcd and kube-apiserver on loopback, and a small client that server-side applies objects to it.

No kubelet, controller manager or scheduler: what the lane checks is what the API server itself does
with an object (schema validation, defaulting, CEL compilation of DRA selectors, admission). The
binaries come from scripts/build-k8s-tools.sh. The test makes its own PKI with the `openssl` command
(a CA, the API server's serving certificate for 127.0.0.1, an admin client certificate in
`system:masters`, the service-account signing key the API server insists on) and an admin kubeconfig
for the Pulumi provider, all in a temporary directory.

Server-side apply is the PATCH of `application/apply-patch+yaml` (kubernetes.io/docs/reference/
using-api/server-side-apply/); `dryRun=All` runs every validation and admission step and stores nothing.
"""

from __future__ import annotations

import copy
import json
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FIELD_MANAGER = "ascend-fleet-kube-lane"
READY_SECONDS = 120.0


class ClusterFailed(AssertionError):
    """etcd or the API server did not start; the message carries their output."""


class Refused(AssertionError):
    """The API server refused a request; the message carries its status and reason."""

    def __init__(self, status: int, body: dict[str, Any], what: str) -> None:
        self.status, self.body = status, body
        super().__init__(f"{what}: HTTP {status}: {body.get('message') or json.dumps(body)}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise ClusterFailed(f"openssl {' '.join(args)} failed: {result.stderr}")


def make_pki(pki: Path) -> None:
    """ca.crt/key, serving.crt/key (127.0.0.1, localhost), admin.crt/key (O=system:masters), sa.key/pub."""
    pki.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=kube-lane-ca",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=pki)  # fmt: skip
    (pki / "serving.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    (pki / "admin.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, subject in (("serving", "/CN=kube-apiserver"), ("admin", "/O=system:masters/CN=kube-lane-admin")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", cwd=pki)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=pki)  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def kubeconfig(pki: Path, server: str) -> dict[str, Any]:
    """The admin client configuration (what `kubectl` and the Pulumi provider read)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "lane", "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": "admin", "user": {
            "client-certificate": str(pki / "admin.crt"), "client-key": str(pki / "admin.key")}}],
        "contexts": [{"name": "lane", "context": {"cluster": "lane", "user": "admin"}}],
        "current-context": "lane",
    }  # fmt: skip


def etcd_argv(etcd: str, data: Path, client: int, peer: int) -> list[str]:
    return [
        etcd, "--name", "lane", "--data-dir", str(data),
        "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
        "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
        "--initial-cluster", f"lane=http://127.0.0.1:{peer}", "--log-level", "warn",
    ]  # fmt: skip


def apiserver_argv(apiserver: str, pki: Path, etcd_port: int, port: int) -> list[str]:
    """resource.k8s.io/v1 is GA and served by default since 1.34; `--runtime-config` says so anyway,
    so that a version that stops serving it by default fails here instead of skipping DRA. The client
    CA authenticates the admin certificate (group `system:masters`, which RBAC lets do anything)."""
    return [
        apiserver, "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(port),
        "--etcd-servers", f"http://127.0.0.1:{etcd_port}",
        "--tls-cert-file", str(pki / "serving.crt"), "--tls-private-key-file", str(pki / "serving.key"),
        "--client-ca-file", str(pki / "ca.crt"), "--authorization-mode", "Node,RBAC",
        "--service-account-issuer", "https://kubernetes.default.svc",
        "--service-account-key-file", str(pki / "sa.pub"), "--service-account-signing-key-file", str(pki / "sa.key"),
        "--service-cluster-ip-range", "10.96.0.0/16", "--runtime-config", "resource.k8s.io/v1=true",
        "--cert-dir", str(pki / "generated"),
        # A loopback advertise address is refused by the endpoint reconciler, which keeps the `kubernetes`
        # Service's endpoints for in-cluster clients; the lane has none.
        "--endpoint-reconciler-type", "none",
    ]  # fmt: skip


@dataclass
class Client:
    """Just enough of a Kubernetes client: discovery, get, create and server-side apply, over TLS with
    the admin certificate."""

    server: str
    pki: Path
    _resources: dict[tuple[str, str], tuple[str, bool]] = field(default_factory=dict)

    def _context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        context.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return context

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Content-Type", content_type)
        req.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(req, context=self._context(), timeout=60) as response:
                raw = response.read()
            # /readyz and /healthz answer plain text ("ok").
            return json.loads(raw) if raw.startswith(b"{") else {"text": raw.decode(errors="replace")}
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = {"message": raw.decode(errors="replace")}
            raise Refused(err.code, parsed, f"{method} {path}") from None

    def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(collection path prefix, namespaced) of a kind, from the server's discovery documents."""
        if (api_version, kind) not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            for item in self.request("GET", base)["resources"]:
                if "/" not in item["name"]:
                    self._resources[(api_version, item["kind"])] = (f"{base}/{item['name']}", item["namespaced"])
        if (api_version, kind) not in self._resources:
            raise AssertionError(f"the API server serves no {kind} in {api_version}")
        return self._resources[(api_version, kind)]

    def path(self, obj: dict[str, Any]) -> str:
        collection, namespaced = self.resource(obj["apiVersion"], obj["kind"])
        meta = obj["metadata"]
        if namespaced:
            base, plural = collection.rsplit("/", 1)
            collection = f"{base}/namespaces/{meta.get('namespace', 'default')}/{plural}"
        return f"{collection}/{meta['name']}"

    def apply(self, obj: dict[str, Any], *, dry_run: bool) -> dict[str, Any]:
        """Server-side apply `obj`; with `dry_run`, every validation and admission step and no write."""
        query = {"fieldManager": FIELD_MANAGER, "force": "true"} | ({"dryRun": "All"} if dry_run else {})
        path = f"{self.path(obj)}?{urllib.parse.urlencode(query)}"
        return self.request("PATCH", path, obj, content_type="application/apply-patch+yaml")

    def into_namespace(self, objects: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
        """The namespace, created, and copies of `objects` with each namespaced one moved into it: each
        stack gets its own, as the committed stacks render objects of the same names."""
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}, dry_run=False)
        placed = copy.deepcopy(objects)
        for obj in placed:
            if self.resource(obj["apiVersion"], obj["kind"])[1]:
                obj["metadata"]["namespace"] = namespace
        return placed

    def get(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.request("GET", self.path(obj))


def wait_ready(client: Client, processes: dict[str, subprocess.Popen], logs: dict[str, Path]) -> None:
    """Until /readyz answers ok (generous bound); a process that exits, or the bound, fails with the logs."""
    deadline = time.monotonic() + READY_SECONDS
    last = ""
    while time.monotonic() < deadline:
        for name, proc in processes.items():
            if proc.poll() is not None:
                raise ClusterFailed(f"{name} exited with {proc.returncode}:\n{_tail(logs)}")
        try:
            client.request("GET", "/readyz")
            return
        except (Refused, OSError) as err:
            last = str(err)
        time.sleep(0.5)
    raise ClusterFailed(f"the API server was not ready in {READY_SECONDS:.0f} s ({last}):\n{_tail(logs)}")


def wait_established(client: Client, crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD as stored once its `Established` condition is true (generous bound): until then the API server
    does not serve its kind."""
    deadline = time.monotonic() + READY_SECONDS
    while True:
        stored = client.get(crd)
        conditions = {c["type"]: c["status"] for c in (stored.get("status") or {}).get("conditions") or ()}
        if conditions.get("Established") == "True":
            return stored
        if time.monotonic() > deadline:
            raise ClusterFailed(f"CRD {crd['metadata']['name']} not Established in {READY_SECONDS:.0f} s: {conditions}")
        time.sleep(0.5)


def _tail(logs: dict[str, Path]) -> str:
    return "\n".join(f"--- {name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-40:])
                     for name, p in logs.items())  # fmt: skip


@dataclass
class Cluster:
    """A running etcd and API server, their logs and an admin client."""

    client: Client
    kubeconfig: Path
    logs: dict[str, Path]
    processes: dict[str, subprocess.Popen]
    started_seconds: float

    def stop(self) -> None:
        for proc in reversed(list(self.processes.values())):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def start(tools: Path, work: Path) -> Cluster:
    """etcd, then the API server, on free loopback ports under `work`; returns once /readyz is ok."""
    began = time.monotonic()
    pki = work / "pki"
    make_pki(pki)
    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    logs = {"etcd": work / "etcd.log", "kube-apiserver": work / "kube-apiserver.log"}
    argvs = {
        "etcd": etcd_argv(str(tools / "etcd"), work / "etcd-data", etcd_port, peer_port),
        "kube-apiserver": apiserver_argv(str(tools / "kube-apiserver"), pki, etcd_port, api_port),
    }
    processes: dict[str, subprocess.Popen] = {}
    server = f"https://127.0.0.1:{api_port}"
    config = work / "kubeconfig"
    config.write_text(json.dumps(kubeconfig(pki, server), indent=2))
    cluster = Cluster(Client(server, pki), config, logs, processes, 0.0)
    try:
        for name, argv in argvs.items():
            with logs[name].open("wb") as log:
                processes[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_ready(cluster.client, processes, logs)
    except BaseException:
        cluster.stop()
        raise
    cluster.started_seconds = time.monotonic() - began
    return cluster
