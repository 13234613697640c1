"""What the commands share on the way in and out: exit codes, the error line, `--json` printing, and the
checks of paths and numbers that run before any work (so bad input exits 2 with nothing written).

Exit codes: 0 ok, 1 infeasible (no plan fits / the plan cannot run), 2 bad input.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tenfold.report.format import json_clean

EXIT_OK, EXIT_INFEASIBLE, EXIT_BAD_INPUT = 0, 1, 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print `error: message` to stderr (the message as plain text, never markup); return the exit to
    raise (`raise fail(...)`), code 2 by default."""
    Console(stderr=True).print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(code)


def print_json(obj: dict) -> None:
    """`obj` as indented JSON on stdout, NaN and infinity written as null (`json_clean`)."""
    typer.echo(json.dumps(json_clean(obj), indent=2))


def check_range(flag: str, value: float, lo: float, hi: float = math.inf) -> None:
    """Raise the bad-input exit unless `value` is a finite number with lo <= value <= hi."""
    if not (isinstance(value, int | float) and math.isfinite(value) and lo <= value <= hi):
        allowed = f">= {lo:,g}" if hi == math.inf else f"{lo:,g} to {hi:,g}"
        raise fail(f"{flag} must be {allowed}, got {value!r}")


def writable_file(flag: str, path: Path | str) -> Path:
    """`path` as a file this command may write (checked before any work): not a directory, in an existing
    folder, writable. Raises the bad-input exit naming `flag` otherwise."""
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise fail(f"{flag} {p}: is a directory; give a file name")
    if not folder.is_dir():
        raise fail(f"{flag} {p}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise fail(f"{flag} {p}: not writable")
    return p


def readable_file(flag: str, path: Path | str) -> Path:
    """`path` as a file this command must read: an existing, readable regular file. Raises the bad-input
    exit naming `flag` otherwise."""
    p = Path(path)
    if p.is_dir():
        raise fail(f"{flag} {p}: is a directory; give a file")
    if not p.is_file():
        raise fail(f"{flag} {p}: no such file")
    if not os.access(p, os.R_OK):
        raise fail(f"{flag} {p}: not readable")
    return p


@contextmanager
def progress_bar(label: str, *, hidden: bool, unit: str = "") -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr for long work, as the `progress(done, total)` callback the library calls;
    `hidden` (under --json) draws nothing. `unit` follows the count, e.g. "(tp, pp, cp)"."""
    with Progress(
        TextColumn(label),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}" + (f" {unit}" if unit else "")),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        disable=hidden,
    ) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)
