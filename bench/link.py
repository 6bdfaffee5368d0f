"""A TCP link that adds latency, for the benches: a proxy on 127.0.0.1 in front of a PostgreSQL server that holds
every chunk of bytes, each way, for --delay-ms before passing it on (so a round trip costs twice that more, as over
a network between machines), and counts the round trips the clients ask for on it.

A round trip is what a PostgreSQL client sends and then waits on: a Sync (the end of one statement in the
extended protocol, or of a pipeline of several) or a simple Query. The link reads the client's side of each
connection just far enough to count those (the startup packets, then each message's type and length). It runs
as a process of its own, so its work is not charged to the process measured; the benches ask it for its count on
a second port.

    python bench/link.py --to 127.0.0.1:5432 --delay-ms 1    # prints "PORT CONTROL_PORT", serves until killed

From a bench: `with Link("127.0.0.1", 5432, delay_s=0.001) as link: link.url(url)`, `link.round_trips()`.
"""

from __future__ import annotations

import argparse
import select
import socket
import struct
import subprocess
import sys
import time
from collections import deque
from urllib.parse import urlsplit

# Startup packets (no type byte) a client may send before its StartupMessage: each is answered, then it goes on.
_BEFORE_STARTUP = {80877103, 80877104, 80877102}   # SSLRequest, GSSENCRequest, CancelRequest
_CHUNK = 65536


class _Frontend:
    """Counts the round trips in a client's byte stream as it passes, however the stream is cut into chunks."""

    def __init__(self, counted) -> None:
        self._counted = counted   # called with the number found in each chunk
        self._head = b""          # the start of a message whose header is not whole yet
        self._skip = 0            # bytes of the current message's body still to pass
        self._typed = False       # past the StartupMessage: every message is type byte + length

    def feed(self, data: bytes) -> None:
        found, at = 0, min(self._skip, len(data))
        self._skip -= at
        data = self._head + data[at:]
        at = 0
        while True:
            need = 5 if self._typed else 8
            if len(data) - at < need:
                break
            if self._typed:
                kind, (length,) = data[at:at + 1], struct.unpack_from("!i", data, at + 1)
                found += kind in (b"S", b"Q")
                size = 1 + length
            else:
                size, code = struct.unpack_from("!ii", data, at)
                self._typed = code not in _BEFORE_STARTUP
            if len(data) - at < size:
                self._skip = size - (len(data) - at)
                at = len(data)
                break
            at += size
        self._head = data[at:]
        if found:
            self._counted(found)


class Proxy:
    """The link itself: listens on 127.0.0.1 (`port`), and on `control_port`, which answers its count. One thread
    serves every connection (select, whose timeout is precise to the microsecond), so bytes wait for no other
    thread to be scheduled: each chunk goes on once its delay is over."""

    def __init__(self, host: str, port: int, delay_s: float) -> None:
        self.target, self.delay_s = (host, port), delay_s
        self.trips = 0
        self._listener, self._control = self._listen(), self._listen()
        self.port, self.control_port = self._listener.getsockname()[1], self._control.getsockname()[1]
        self._peer: dict[socket.socket, socket.socket] = {}   # each end of a connection, to the other
        self._reading: set[socket.socket] = set()             # ends not at their end of file yet
        self._held: dict[socket.socket, deque] = {}           # (due, bytes) on their way to an end; b"": the end
        self._watch: dict[socket.socket, _Frontend] = {}      # a client's end, read for its round trips

    @staticmethod
    def _listen() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        return sock

    def serve(self) -> None:
        while True:
            due = [held[0][0] for held in self._held.values() if held]
            wait = max(0.0, min(due) - time.monotonic()) if due else None
            readable, _, _ = select.select([self._listener, self._control, *self._reading], [], [], wait)
            for sock in readable:
                if sock is self._listener:
                    self._accept()
                elif sock is self._control:
                    asker, _ = sock.accept()
                    with asker:
                        asker.sendall(f"{self.trips}\n".encode())
                else:
                    self._read(sock)
            self._deliver()

    def _accept(self) -> None:
        client, _ = self._listener.accept()
        server = socket.create_connection(self.target)
        for sock, other in ((client, server), (server, client)):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._peer[sock], self._held[sock] = other, deque()
            self._reading.add(sock)
        self._watch[client] = _Frontend(self._count)

    def _count(self, found: int) -> None:
        self.trips += found

    def _read(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(_CHUNK)
        except OSError:
            data = b""
        self._held[self._peer[sock]].append((time.monotonic() + self.delay_s, data))
        if not data:
            self._reading.discard(sock)
        elif sock in self._watch:
            self._watch[sock].feed(data)

    def _deliver(self) -> None:
        now = time.monotonic()
        for sock, held in list(self._held.items()):
            while held and held[0][0] <= now:
                _, data = held.popleft()
                try:
                    if data:
                        sock.sendall(data)
                        continue
                except OSError:
                    pass
                self._end(sock)
                break

    def _end(self, sock: socket.socket) -> None:
        """No more bytes go to `sock`; once none go the other way either, the connection is closed."""
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        del self._held[sock]
        peer = self._peer[sock]
        if peer not in self._held:
            for end in (sock, peer):
                self._reading.discard(end)
                self._watch.pop(end, None)
                del self._peer[end]
                end.close()


class Link:
    """The link as a process of its own, for a bench: `url(url)` is `url` through it, `round_trips()` its count
    so far (every connection through it)."""

    def __init__(self, host: str, port: int, delay_s: float) -> None:
        self._argv = [sys.executable, __file__, "--to", f"{host}:{port}", "--delay-ms", f"{delay_s * 1000:g}"]

    def __enter__(self) -> Link:
        self._proc = subprocess.Popen(self._argv, stdout=subprocess.PIPE, text=True)
        self.port, self.control_port = map(int, self._proc.stdout.readline().split())
        return self

    def __exit__(self, *exc) -> None:
        self._proc.kill()
        self._proc.wait()

    def url(self, url: str) -> str:
        return through(url, self.port)

    def round_trips(self) -> int:
        return count_at(self.control_port)


def through(url: str, port: int) -> str:
    """A postgresql:// URL to the server behind the link on `port`, as its user and database."""
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    return parts._replace(netloc=f"{user}127.0.0.1:{port}").geturl()


def count_at(control_port: int) -> int:
    """The round trips a link has carried, asked on its control port (from any process)."""
    with socket.create_connection(("127.0.0.1", control_port)) as sock:
        return int(sock.makefile().readline())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--to", required=True, metavar="HOST:PORT", help="the PostgreSQL server")
    parser.add_argument("--delay-ms", type=float, default=1.0, help="added each way (default 1)")
    args = parser.parse_args()
    host, _, port = args.to.rpartition(":")
    proxy = Proxy(host, int(port), args.delay_ms / 1000)
    print(proxy.port, proxy.control_port, flush=True)
    proxy.serve()


if __name__ == "__main__":
    main()
