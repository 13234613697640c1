"""Reading JSON Lines files (one JSON object per line): the metrics, telemetry and summary records that
`tenfold train` writes and `tenfold report`, `tenfold inspect` and the tests read back.

A top-level module with only the standard library, so that both the engine (which needs torch) and the
report (which must never import it) can use it: `tenfold.engine.telemetry.writers` cannot be imported
without running `tenfold.engine`'s torch imports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_jsonl(path: str | Path, required: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The objects of a JSONL file in order, blank lines skipped (an empty file gives []). ValueError
    naming the file and line of a line that is not JSON, or not an object holding every `required` key."""
    rows = []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{i}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict) and not required:
            raise ValueError(f"{path}:{i}: not a JSON object; got {line[:80]!r}")
        missing = [k for k in required if not isinstance(row, dict) or k not in row]
        if missing:
            raise ValueError(
                f"{path}:{i}: missing fields {missing}: a row needs {', '.join(required)}; got {line[:80]!r}"
            )
        rows.append(row)
    return rows
