"""A request body over the cap gets a 413 before the server reads it: from Content-Length without
reading a byte, and for a chunked body as soon as the bytes received pass the cap (a real socket, so
the server cannot have buffered the whole body first)."""

import json
import socket

import pytest

from tenfold.web import create_app
from tenfold.web.bounds import MAX_BODY_BYTES, Limits

from .conftest import live_server

HEAD = "POST /api/estimate/train HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def answer(sock: socket.socket) -> tuple[int, dict]:
    """Status and JSON body of the server's answer on `sock`."""
    data = b""
    sock.settimeout(10)
    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < length(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    return int(head.split()[1]), json.loads(body)


def length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


@pytest.fixture(scope="module")
def server():
    with live_server(create_app()) as addr:
        yield addr


def test_declared_large_body_is_refused_unread(server):
    # 500 MB announced, 10 bytes sent: the 413 comes without waiting for the rest
    with socket.create_connection(server) as s:
        s.sendall((HEAD + "Content-Length: 500000000\r\n\r\n").encode() + b'{"model": ')
        status, d = answer(s)
    assert status == 413
    assert "500,000,000 bytes" in d["message"] and f"at most {MAX_BODY_BYTES:,} bytes" in d["message"]


def test_chunked_body_is_cut_off_at_the_cap(server):
    # a chunked body that never ends: the 413 comes once the cap is passed
    with socket.create_connection(server) as s:
        s.sendall((HEAD + "Transfer-Encoding: chunked\r\n\r\n").encode())
        piece = b" " * 16384
        for _ in range(MAX_BODY_BYTES // len(piece) + 2):
            s.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        status, d = answer(s)
    assert status == 413 and "still sending" in d["message"]


def test_body_within_the_cap_is_served(server):
    body = json.dumps({"model": "llama3-8b", "gpu": "h100-sxm", "tp": 2, "pp": 1, "vp": 1, "dp": 4}).encode()
    pad = b" " * (MAX_BODY_BYTES - len(body))  # exactly at the cap: still read
    for head in (f"Content-Length: {len(body + pad)}\r\n", "Transfer-Encoding: chunked\r\n"):
        with socket.create_connection(server) as s:
            s.sendall((HEAD + head + "\r\n").encode())
            if "chunked" in head:
                s.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body + pad), body + pad))
            else:
                s.sendall(body + pad)
            status, d = answer(s)
        assert status == 200 and d["result"]["feasible"] is True


def test_cap_is_a_limit(client):
    assert create_app(max_body_bytes=100).state.web.limits.max_body_bytes == 100
    with pytest.raises(ValueError, match="max_body_bytes must be >= 1, got 0"):
        Limits(max_body_bytes=0)
    r = client.post("/api/compare", content=b"[" * (MAX_BODY_BYTES + 1))
    assert r.status_code == 413
