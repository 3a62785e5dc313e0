"""A TCP proxy on 127.0.0.1 that a test can cut: a machine losing its network to the database.

with TcpProxy("127.0.0.1", 5432) as proxy:   # connect to 127.0.0.1:proxy.port instead
    proxy.sever()   # every connection through it breaks; new ones are closed at once
    proxy.heal()    # connections go through again
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Self

__all__ = ["TcpProxy"]


class TcpProxy:
    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._severed = False
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def sever(self) -> None:
        with self._lock:
            self._severed = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _close(sock)

    def heal(self) -> None:
        with self._lock:
            self._severed = False

    def close(self) -> None:
        self._closed = True
        self.sever()
        _close(self._listener)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                severed = self._severed
            if severed:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True).start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    _close(src)
    _close(dst)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
