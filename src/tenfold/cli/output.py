"""What the commands share on the way out: exit codes, the error line, and `--json` printing.

Exit codes: 0 ok, 1 infeasible (no plan fits / the plan cannot run), 2 bad input.
"""

from __future__ import annotations

import json

import typer
from rich.console import Console

from tenfold.report.format import json_clean

EXIT_OK, EXIT_INFEASIBLE, EXIT_BAD_INPUT = 0, 1, 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print `error: message` to stderr; return the exit to raise (`raise fail(...)`), code 2 by default."""
    Console(stderr=True).print(f"[red]error:[/red] {message}")
    return typer.Exit(code)


def print_json(obj: dict) -> None:
    """`obj` as indented JSON on stdout, NaN and infinity written as null (`json_clean`)."""
    typer.echo(json.dumps(json_clean(obj), indent=2))
