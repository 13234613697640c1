"""What the commands share on the way in and out: exit codes, the error line, `--json` printing, and the
checks of paths and numbers that run before any work (so bad input exits 2 with nothing written).

Exit codes: 0 ok, 1 infeasible (no plan fits / the plan cannot run), 2 bad input.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
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


def physical_memory_bytes() -> int:
    """This machine's RAM (POSIX sysconf; 0 where unknown, which disables the memory checks)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def check_memory(need_bytes: float, what: str) -> None:
    """Raise ValueError naming `what` when it needs more than this machine's RAM."""
    have = physical_memory_bytes()
    if have and need_bytes > have:
        raise ValueError(
            f"{what} needs at least {need_bytes / 2**30:,.1f} GiB; this machine has {have / 2**30:,.1f} GiB"
        )


def check_writable_dir(path: Path, flag: str) -> None:
    """Raise ValueError naming `flag` unless `path` is (or can be created as) a writable folder."""
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {str(path)!r} is a file, not a folder")
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise ValueError(f"{flag} {str(path)!r} is not writable ({str(existing)!r} is a file)")
    try:  # permission bits do not tell (root, read-only mounts, /proc): try a scratch file, removed at once
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise ValueError(
            f"{flag} {str(path)!r} is not writable ({err.strerror} in {str(existing)!r})"
        ) from None


def writable_file(flag: str, path: Path | str) -> Path:
    """`path` as a file this command may write (checked before any work): not a directory, in an existing
    folder, writable. Raises the bad-input exit naming `flag` otherwise."""
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise fail(f"{flag} {p}: is a directory; give a file name")
    if not folder.is_dir():
        raise fail(f"{flag} {p}: folder {folder} does not exist")
    try:
        check_writable_dir(folder, flag)
    except ValueError as err:
        raise fail(str(err)) from None
    if p.exists() and not os.access(p, os.W_OK):
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
