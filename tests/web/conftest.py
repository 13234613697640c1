"""The web tests' shared TestClient (one app with the served limits per test module), and a live uvicorn
server on a free loopback port for tests that need real sockets (the browser, the body cap)."""

import socket
import threading
import time
from contextlib import contextmanager

import pytest
import uvicorn
from fastapi.testclient import TestClient

from tenfold.web import create_app


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def live_server(app):
    """`app` served by uvicorn in a thread; yields (host, port)."""
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    t_end = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < t_end, "server did not start"
        time.sleep(0.05)
    try:
        yield "127.0.0.1", port
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
