"""Reading the catalogs shipped under `tenfold/data/` (TOML and CSV), with each number's provenance.

A catalog number is written either bare (`layers = 80`) or as a sourced inline table
(`bf16 = { value = 989.4, source = "https://...", confidence = "high", note = "..." }`). `sourced()` turns
both into a `Sourced`; the loaders keep those next to the SI values they derive, so a result can always say
where a figure came from.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

GiB = 1024**3
GB = 1e9


@dataclass(frozen=True, kw_only=True)
class Sourced:
    """One catalog number and where it came from.

    Fields:
        value: the number in the catalog's unit (the key's suffix names it, e.g. `_GBps`).
        source: URL (or a citation where no URL was recorded).
        confidence: "high", "medium" or "low", as graded when the figure was recorded.
        note: what was assumed or derived, if anything.
    """

    value: float
    source: str = ""
    confidence: str = ""
    note: str = ""


def sourced(entry: Any, *, where: str) -> Sourced:
    """A catalog entry as `Sourced`; `where` names the file and key for error messages."""
    if isinstance(entry, dict):
        if "value" not in entry:
            raise ValueError(f"{where}: a sourced entry needs a 'value', got keys {sorted(entry)}")
        return Sourced(
            value=entry["value"],
            source=str(entry.get("source", "")),
            confidence=str(entry.get("confidence", "")),
            note=str(entry.get("note", "")),
        )
    if isinstance(entry, bool) or not isinstance(entry, int | float):
        raise ValueError(f"{where}: expected a number or a sourced table, got {entry!r}")
    return Sourced(value=entry)


def data_dir(kind: str) -> Traversable:
    """The shipped catalog folder `tenfold/data/<kind>`."""
    return files("tenfold") / "data" / kind


def read_toml(path: Traversable | Path) -> dict[str, Any]:
    with path.open("rb") as fh:
        return tomllib.load(fh)


def catalog_entries(kind: str) -> dict[str, Traversable]:
    """name -> file for every `*.toml` in `tenfold/data/<kind>` (name = file stem)."""
    out = {}
    for entry in data_dir(kind).iterdir():
        if entry.name.endswith(".toml"):
            out[entry.name[: -len(".toml")]] = entry
    return dict(sorted(out.items()))


def _spelling(name: str) -> str:
    """A name with case, spaces and punctuation removed, and a trailing rack size (`nvl72`) dropped:
    'H100 SXM', 'h100_sxm' and 'GB200-NVL72' compare equal to 'h100-sxm' and 'gb200'."""
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    return re.sub(r"nvl\d+$", "", key) or key


def match_entry(kind: str, name: str) -> str | None:
    """The catalog entry a user's spelling of `name` means, or None: the exact name, the same name spelt
    another way, or the one entry whose leading words it is ('h100' -> 'h100-sxm'; 'h10' or an ambiguous
    start matches nothing)."""
    entries = catalog_entries(kind)
    key = name.strip().lower()
    if key in entries:
        return key
    spelt = _spelling(key)
    same = [e for e in entries if _spelling(e) == spelt]
    if len(same) == 1:
        return same[0]
    # whole leading words of an entry name only: 'h100' is h100-sxm, 'h10' is nothing
    words = [e for e in entries if any(_spelling("-".join(e.split("-")[:k])) == spelt for k in range(1, 4))]
    return words[0] if len(words) == 1 else None


def resolve(kind: str, name_or_path: str | Path) -> Traversable | Path:
    """A catalog name (`h100-sxm`, also spelt `H100`, `h100 sxm`) or a path to a user's own TOML file.
    An unknown name raises ValueError with the closest catalog names."""
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.exists():
        return p
    entries = catalog_entries(kind)
    hit = match_entry(kind, str(name_or_path))
    if hit is not None:
        return entries[hit]
    close = difflib.get_close_matches(str(name_or_path).lower(), list(entries), n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(f"unknown {kind} entry {name_or_path!r}{hint}; known: {', '.join(entries)}")
