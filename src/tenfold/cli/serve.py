"""`tenfold serve`: the web UI (FastAPI + uvicorn), on the loopback interface unless told otherwise."""

from __future__ import annotations

import json
import socket

import typer
from rich.console import Console

from tenfold.cli.output import fail


def check_bindable(host: str, port: int) -> None:
    """Exit 2 naming the input unless `host` resolves to an address of this machine and `port` is free
    there: bind a socket once and close it, before the server starts (uvicorn reports these as exit 3)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise fail(f"--host {host!r}: not an address or a known host name ({exc})") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as exc:
            raise fail(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc})") from None


def serve(
    host: str = typer.Option("127.0.0.1", help="interface to bind (default loopback: this machine only)"),
    port: int = typer.Option(8000, help="TCP port"),
    time_limit_s: float = typer.Option(30.0, "--time-limit-s", help="longest a search or comparison may run"),
    as_json: bool = typer.Option(False, "--json", help="print the address as one JSON line, no access log"),
) -> None:
    """Serve the web page and JSON API: a comparison form drawing the report's charts; endpoints for
    estimates, search, comparison and the catalogs; the OpenAPI schema at /openapi.json.

    Example: tenfold serve --port 8000   (then open http://127.0.0.1:8000/)

    Exit codes: 0 stopped cleanly, 2 bad input (port out of range or taken, a host that is not this
    machine's, bad limit).
    """
    if not 0 < port < 65536:
        raise fail(f"--port must be 1 to 65535, got {port}")
    if not time_limit_s > 0:
        raise fail(f"--time-limit-s must be > 0, got {time_limit_s}")
    check_bindable(host, port)
    import uvicorn

    from tenfold.web import create_app

    url = f"http://{host}:{port}/"
    if as_json:
        typer.echo(json.dumps({"url": url, "host": host, "port": port, "openapi": url + "openapi.json"}))
    else:
        Console(stderr=True).print(f"tenfold serving on [bold]{url}[/bold] (Ctrl-C stops)")
    uvicorn.run(
        create_app(time_limit_s=time_limit_s),
        host=host,
        port=port,
        access_log=not as_json,
        log_level="warning",
    )
