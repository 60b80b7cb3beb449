"""A TCP proxy between binlake and the server that cuts, stalls and slows connections on demand.

Every connection binlake opens goes through it (the tests point `source.port` at it). A fault applies
to the connections open when it is set and to those opened after it, until `heal()`:
- `cut()` closes both ends of every open connection, as a dropped network path or a killed proxy does;
- `stall()` stops forwarding without closing anything: a half-open connection, which only a read
  timeout can end;
- `slow(seconds)` delays every chunk of data in either direction.
`cut_after(n_bytes)` cuts each connection once it has carried that many bytes from the server: in the
middle of a large SELECT result or a binlog dump.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Proxy:
    upstream_port: int
    port: int = 0
    delay: float = 0.0
    stalled: bool = False
    cut_after_bytes: int | None = None
    stall_after_bytes: int | None = None
    connections: int = 0
    cuts: int = 0
    _listener: socket.socket = field(init=False)
    _pairs: list[tuple[socket.socket, socket.socket]] = field(init=False, default_factory=list)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _closed: threading.Event = field(init=False, default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", self.port))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        self.cut()

    def cut(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
        self.cuts += bool(pairs)

    def stall(self) -> None:
        self.stalled = True

    def slow(self, seconds: float) -> None:
        self.delay = seconds

    def cut_after(self, n_bytes: int | None) -> None:
        self.cut_after_bytes = n_bytes

    def stall_after(self, n_bytes: int | None) -> None:
        """Stall (every connection, from then on) once a connection has carried `n_bytes` from the
        server: a binlog read, where queries carry a few KB."""
        self.stall_after_bytes = n_bytes

    def heal(self) -> None:
        self.stalled, self.delay, self.cut_after_bytes, self.stall_after_bytes = False, 0.0, None, None

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._pairs.append((client, server))
                self.connections += 1
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        from_server = 0
        cut = False
        try:
            while not self._closed.is_set():
                if self.stall_after_bytes is not None and from_server >= self.stall_after_bytes:
                    self.stalled = True
                if self.stalled:
                    time.sleep(0.05)
                    continue
                ready, _, _ = select.select([client, server], [], [], 0.1)
                for src in ready:
                    data = src.recv(65536)
                    if not data:
                        raise ConnectionError
                    if self.delay:
                        time.sleep(self.delay)
                    dst = server if src is client else client
                    dst.sendall(data)
                    if src is server:
                        from_server += len(data)
                        if self.cut_after_bytes is not None and from_server >= self.cut_after_bytes:
                            cut = True
                            raise ConnectionError
        except (OSError, ConnectionError, ValueError):
            pass
        with self._lock:
            if (client, server) in self._pairs:
                self._pairs.remove((client, server))
            self.cuts += cut
        for s in (client, server):
            try:
                s.close()
            except OSError:
                pass
