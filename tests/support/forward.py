"""A TCP forwarder on this machine, in threads: a port that reaches another (the replicated engine
stack's SSH endpoint at the bridge's gateway), or a registry whose downloads a test holds (BlobGate)."""

from __future__ import annotations

import contextlib
import re
import socket
import threading


class Forward:
    """Forwards each connection to `listen` to `target`, until `close`. A subclass may hold what a
    client sends (`hold`) before it goes on; what the target sends back is never held."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.target = target
        self.server = socket.create_server(listen)
        self.server.settimeout(0.5)
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        return self.server.getsockname()[1]

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, upstream, self.hold), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, None), daemon=True).start()

    def hold(self, data: bytes) -> None:
        """Called with each piece a client sends, before it is forwarded; forwards at once here."""

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, hold) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if hold is not None:
                    hold(data)
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.stopped.set()
        self.server.close()


# A blob download of the registry API: `GET /v2/<name>/blobs/<digest>` (distribution's
# docs/spec/api.md, "Pulling a Layer"); the image's config is fetched the same way.
BLOB_GET = re.compile(rb"GET /v2/(?P<name>\S+)/blobs/(?P<digest>sha256:[0-9a-f]{64}) HTTP/1\.[01]$")


class BlobGate(Forward):
    """A registry behind a gate: every blob download waits at the gate until `open`; the rest of
    the registry API (the `/v2/` probe, the manifests, a TLS attempt it refuses) passes at once.

    A request's head arrives in one piece on loopback (Go's HTTP client writes it in one flush),
    so its first line is matched on the piece it starts."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        super().__init__(listen, target)
        self.opened = threading.Event()
        self.held: list[str] = []
        """The digests whose download waited at the gate, in the order they came."""

    def hold(self, data: bytes) -> None:
        request = BLOB_GET.match(data.split(b"\r\n", 1)[0])
        if request is None or self.opened.is_set():
            return
        self.held.append(request["digest"].decode())
        self.opened.wait()

    def open(self) -> None:
        self.opened.set()

    def close(self) -> None:
        self.open()  # a download still held goes on and fails against the closed registry, rather than hang
        super().close()
