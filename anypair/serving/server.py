"""uvicorn on a socket bound before it starts, so that a busy port is one clear error before the
server runs, and the address printed is the one really listened on (port 0 picks a free one).

- `run_server(app, sock, on_ready)`: in the foreground until Ctrl-C or SIGTERM (`anypair serve`).
- `server_in_thread(app)`: in a thread, for a test or a benchmark in the same process.
"""
from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from typing import Callable, Iterator

import uvicorn
from fastapi import FastAPI

from anypair.errors import InputError

# how long Ctrl-C waits for answers in progress (a request finishes within one generation)
GRACEFUL_SHUTDOWN_S = 30


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket listening on host:port; InputError naming the address if it cannot."""
    if not 0 <= port <= 65535:
        raise InputError(f"--port must be from 0 to 65535 (0: any free port), got {port}")
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}: choose another --port "
                         "(or stop what listens there), or another --host") from None


def address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def _config(app: FastAPI) -> uvicorn.Config:
    # the app logs one line per request itself: uvicorn's access log would be a second one
    return uvicorn.Config(app, access_log=False, log_level="warning", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)


def run_server(app: FastAPI, sock: socket.socket, on_ready: Callable[[str], None]) -> None:
    """Serve on `sock` until interrupted; `on_ready(url)` once it accepts connections."""
    server = uvicorn.Server(_config(app))

    async def serve() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.02)
        if server.started:
            on_ready(address(sock))
        await task

    asyncio.run(serve())


@contextlib.contextmanager
def server_in_thread(app: FastAPI, host: str = "127.0.0.1", port: int = 0,
                     start_timeout_s: float = 30.0) -> Iterator[str]:
    """Serve `app` in a daemon thread; yields its base URL, stops it on exit."""
    sock = listening_socket(host, port)
    server = uvicorn.Server(_config(app))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True,
                              name="anypair-uvicorn")
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.02)
    try:
        yield address(sock)
    finally:
        server.should_exit = True
        thread.join(GRACEFUL_SHUTDOWN_S)
        sock.close()
