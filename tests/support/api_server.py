"""A stand-in Kubernetes API server on 127.0.0.1 for the tests of `ops.kube_api`: real HTTPS, with the
PKI and admin kubeconfig of the real-API-server lane (tests/kube/cluster.py), so `load_access` reads a
kubeconfig as it reads a cluster's. Each GET is answered by the test's `answer(handler, path, query)`,
which writes what it likes to the socket: a JSON page, an error, or bytes trickled one at a time."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.kube.cluster import kubeconfig, make_pki

Answer = Callable[[BaseHTTPRequestHandler, str, dict[str, str]], None]
TRICKLE_SECONDS = 120.0
"""How long a trickled answer lasts: far past any deadline a test sets, so a client without one is
still reading when the test's own bound (a hang guard) has passed."""


def json_page(handler: BaseHTTPRequestHandler, body: object) -> None:
    data = json.dumps(body).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def trickle(handler: BaseHTTPRequestHandler, data: bytes, seconds: float = TRICKLE_SECONDS) -> None:
    """`data` one byte at a time, evenly over `seconds` (each byte far sooner than any read timeout),
    until it is all sent or the client has gone."""
    every = seconds / max(len(data), 1)
    try:
        for byte in data:
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            time.sleep(every)
    except OSError:  # the client shut the connection: what a deadline does
        pass


def pki(folder: Path) -> Path:
    """The lane's PKI (a CA, the serving certificate for 127.0.0.1, an admin client certificate) in `folder`."""
    make_pki(folder)
    return folder


@contextmanager
def api_server(pki: Path, answer: Answer) -> Iterator[Path]:
    """The path of a kubeconfig whose current context is a server answering with `answer`, serving with
    the certificates of `pki` (made by `pki`); the server stops when the block ends."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki / "serving.crt", pki / "serving.key")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            url = urllib.parse.urlsplit(self.path)
            answer(self, url.path, dict(urllib.parse.parse_qsl(url.query)))
            self.close_connection = True

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True  # a trickle still sending to a client that left does not hold the test
    server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield _written(pki, kubeconfig(pki, f"https://127.0.0.1:{server.server_address[1]}"))
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def silent_server(pki: Path) -> Iterator[Path]:
    """The path of a kubeconfig whose server takes the TCP connection and never says a word (not even
    the TLS handshake): the kernel accepts into the listen backlog; nothing ever reads it."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield _written(pki, kubeconfig(pki, f"https://127.0.0.1:{listener.getsockname()[1]}"))


def _written(pki: Path, config: dict) -> Path:
    """The kubeconfig `config` as a file beside the PKI, named after its server's port."""
    path = pki / f"kubeconfig-{config['clusters'][0]['cluster']['server'].rsplit(':', 1)[1]}"
    path.write_text(json.dumps(config))
    return path
