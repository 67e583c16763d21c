"""A raw TCP server on 127.0.0.1 that answers with scripted bytes, for hostile-reply tests.

No HTTP library writes the replies, so a test can send what no well-behaved
server would (a status ``099``, ``HTTP/1.x``, a control character in a
header, bytes past the end of a reply). The server runs on its own threads,
outside the client's event loop, and records what it read::

    with RawHttpServer([[reply], [Unasked(extra)], ...]) as server:
        ...                      # call server.url; connection n follows script n
    server.requests              # per accepted connection, the requests it read
    server.connections           # how many connections were accepted

A script is the steps of one connection, in order: ``bytes`` are sent once
one request has been read (head and ``Content-Length`` body), ``Unasked``
bytes are sent without waiting for a request (when their gate opens). When its script is
done the connection stays open until the client closes it (or is closed at
once with ``close_after=True``). Connections beyond the scripts are closed
as soon as they are accepted.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from envckpt.closing import Closeable

# Between polls of the listening socket for the stop flag.
_POLL_SECONDS = 0.05
# Longest wait for an ``Unasked`` step's gate.
_GATE_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Unasked:
    """Bytes sent without waiting for a request (a reply nobody asked for).

    With a ``gate``, only once the test sets it (say, when the client has
    read the reply before and put the connection back in its pool).
    """

    data: bytes
    gate: threading.Event | None = None


Step = bytes | Unasked


def ok(body: bytes = b"{}", extra: bytes = b"") -> bytes:
    """A whole, well-formed HTTP/1.1 200 reply with a Content-Length (``extra``: headers)."""
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


class RawHttpServer(Closeable):
    """Serves ``scripts[n]`` on the n-th connection it accepts (see module docstring)."""

    def __init__(self, scripts: Sequence[Sequence[Step]], *, close_after: bool = False) -> None:
        self._scripts = [tuple(script) for script in scripts]
        self._close_after = close_after
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(_POLL_SECONDS)
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests: list[list[bytes]] = []
        # Set when a connection has sent every step of its script.
        self.script_done = [threading.Event() for _ in self._scripts]
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._acceptor = threading.Thread(target=self._accept, name="raw-http-accept", daemon=True)

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self.requests)

    def __enter__(self) -> RawHttpServer:
        self._acceptor.start()
        return self

    def close(self) -> None:
        """Close the listener and every connection; wait for the threads."""
        self._stopping.set()
        self._acceptor.join()
        self._listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            # Wakes a thread blocked in recv; already closed by the client or the script.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            sock.settimeout(None)
            with self._lock:
                index = len(self.requests)
                self.requests.append([])
                self._sockets.append(sock)
            thread = threading.Thread(
                target=self._serve, args=(sock, index), name=f"raw-http-{index}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def _serve(self, sock: socket.socket, index: int) -> None:
        with sock:
            if index >= len(self._scripts):
                return  # no script: closed at once
            reader = _RequestReader(sock)
            try:
                for step in self._scripts[index]:
                    if isinstance(step, bytes):
                        request = reader.request()
                        if request is None:
                            return  # the client went away first
                        with self._lock:
                            self.requests[index].append(request)
                        sock.sendall(step)
                    else:
                        if step.gate is not None and not step.gate.wait(_GATE_SECONDS):
                            return  # the test never opened it: it failed already
                        sock.sendall(step.data)
                self.script_done[index].set()
                if not self._close_after:
                    while sock.recv(65536):  # until the client hangs up (or the server closes)
                        pass
            except OSError:
                pass  # reset by the client, or close(): the test checks what it saw


class _RequestReader:
    """Requests read off one socket: the head up to the empty line, then the sized body."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

    def request(self) -> bytes | None:
        """The next whole request; ``None`` if the connection ends first."""
        while b"\r\n\r\n" not in self._buffer:
            if not self._fill():
                return None
        end = self._buffer.index(b"\r\n\r\n") + 4
        length = 0
        for line in self._buffer[:end].split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(self._buffer) < end + length:
            if not self._fill():
                return None
        request, self._buffer = self._buffer[: end + length], self._buffer[end + length :]
        return request

    def _fill(self) -> bool:
        data = self._sock.recv(65536)
        self._buffer += data
        return bool(data)
