"""Where a `Recorder`'s records go: `telemetry.jsonl` and TensorBoard event files.

JSONL: one object per line per (step, layer, gemm, side, recipe); the fields are `OperandRecord`'s and
`OperandStats`'s, flattened, plus ``schema`` (the version, `SCHEMA_VERSION`). docs/numerics.md documents
them; other tools (`tenfold inspect`, the web heat-map) read them, so fields are only ever added.

TensorBoard: scalars ``<layer>/<gemm>.<tensor>/<recipe>/{clip_frac,underflow_frac,sqnr_db,amax}`` and a
histogram of the chosen scales per operand, written with `torch.utils.tensorboard.SummaryWriter` (the
`tensorboard` package's event-file writer underneath).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tenfold.engine.telemetry.records import OperandRecord, TelemetryConfig

SCHEMA_VERSION = 1
JSONL_NAME = "telemetry.jsonl"
TB_DIR = "tb"


def record_line(rec: OperandRecord) -> dict[str, Any]:
    """The JSONL object of one record."""
    return {"schema": SCHEMA_VERSION, **rec.to_dict()}


class Writers:
    """Appends records to the JSONL file and the TensorBoard writer of one output folder."""

    def __init__(self, out_dir: Path, config: TelemetryConfig) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = out_dir / JSONL_NAME if config.jsonl else None
        self._jsonl = self.jsonl_path.open("a") if self.jsonl_path is not None else None
        self._tb: Any = None
        if config.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(out_dir / TB_DIR))

    def write(self, records: list[OperandRecord]) -> None:
        if self._jsonl is not None:
            for r in records:
                self._jsonl.write(json.dumps(record_line(r)) + "\n")
            self._jsonl.flush()
        if self._tb is not None:
            import numpy as np

            for r in records:
                tag = f"{r.layer}/{r.gemm}.{r.tensor}/{r.recipe}"
                st = r.stats
                for k in ("clip_frac", "underflow_frac", "sqnr_db", "amax"):
                    v = getattr(st, k)
                    if v is not None:
                        self._tb.add_scalar(f"{tag}/{k}", v, r.step)
                if st.scale_hist:
                    vals = np.repeat([v for v, _ in st.scale_hist], [c for _, c in st.scale_hist])
                    self._tb.add_histogram(f"{tag}/scales_{st.scale_kind}", vals, r.step)
            self._tb.flush()

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
