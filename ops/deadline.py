"""An overall deadline for one HTTPS request made with urllib: from the TCP connection to the last byte.

A socket timeout bounds each read, not an answer: a server that sends a byte every few seconds never
meets it, and a read of its answer never ends. So each connection the request opens (through
`Https`, urllib's own handler with one seam changed) is made within what is left of the deadline,
and a timer shuts it down when the deadline passes, wherever the read is: the TLS handshake, the
status line and headers, or the body. The shutdown goes through a duplicate of the socket's
descriptor, made as soon as the TCP connection is: the TLS layer then takes the socket object over,
and shutdown(2) acts on the connection whichever descriptor names it. The blocked read returns end
of file or fails, and `expired` (the deadline has passed) tells the caller why.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
import urllib.request
from typing import Any


class Deadline:
    """Started when made; `close()` when the request is done (it stops the timer, frees the duplicates)."""

    def __init__(self, seconds: float) -> None:
        self._end = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._twins: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def connect(self, address: tuple[str, int], timeout: float, source_address: Any = None) -> socket.socket:
        """`socket.create_connection`, as http.client calls it, within what is left of the deadline."""
        left = self._end - time.monotonic()
        if left <= 0:  # a redirect, after the deadline
            raise TimeoutError("the deadline passed before the connection was made")
        sock = socket.create_connection(address, min(timeout, left), source_address)
        with self._lock:
            self._twins.append(sock.dup())
            if self.expired:  # the timer may have fired while connecting
                _cut(self._twins[-1])
        return sock

    @property
    def expired(self) -> bool:
        """The deadline has passed: whatever ended the request (the shutdown, or a socket timeout that
        the deadline's remainder set and that fired first), it did not end in time."""
        return time.monotonic() >= self._end

    def _expire(self) -> None:
        with self._lock:
            for twin in self._twins:
                _cut(twin)

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            for twin in self._twins:
                twin.close()
            self._twins.clear()


def _cut(twin: socket.socket) -> None:
    with contextlib.suppress(OSError):  # the peer may have closed the connection already
        twin.shutdown(socket.SHUT_RDWR)


class Https(urllib.request.HTTPSHandler):
    """urllib's HTTPS handler (proxies, redirects and HTTP errors as `urlopen` has them) whose connections
    are made by `deadline.connect`: `_create_connection` is http.client's seam for the TCP connection
    (CPython's Lib/http/client.py, `HTTPConnection.connect`; its own tests replace it too)."""

    def __init__(self, context: ssl.SSLContext, deadline: Deadline) -> None:
        super().__init__(context=context)
        self._deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req, context=self._context)

    def _connection(self, host: str, **kwargs: Any) -> http.client.HTTPSConnection:
        connection = http.client.HTTPSConnection(host, **kwargs)
        connection._create_connection = self._deadline.connect  # type: ignore[attr-defined]
        return connection
