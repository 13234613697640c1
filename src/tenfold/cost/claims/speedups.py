"""The model's per-GPU training speedup over H100 against NVIDIA's measured Megatron-Bridge pairs.

Each pair (tenfold/data/cost/speedups.toml) is two published runs of one model: a baseline on H100 and a
target on a Blackwell GPU, each with its own GPU count and global batch. The model searches the best layout
at each run's configuration (`search_training`, the same search `tenfold compare` uses) and the predicted
ratio target tok/s/GPU / baseline tok/s/GPU is set beside the measured one:

    error = predicted ratio / measured ratio - 1

This checks the part of `tenfold compare` that matters most for the Blackwell question (the ratio), apart
from the absolute throughput, which docs/perf.md validates row by row.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from tenfold.perf.errors import Infeasible
from tenfold.perf.specs.catalog import data_dir, read_toml
from tenfold.perf.training.search import search_training


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """One side of a measured pair: GPU, count, global batch (sequences) and the measured tok/s/GPU."""

    gpu: str
    num_gpus: int
    global_batch: int
    tokens_per_s_per_gpu: float

    def __post_init__(self) -> None:
        for key in ("num_gpus", "global_batch"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 1:
                raise ValueError(f"{key} must be an integer >= 1, got {getattr(self, key)!r}")
        if not self.tokens_per_s_per_gpu > 0:
            raise ValueError(f"tokens_per_s_per_gpu must be > 0, got {self.tokens_per_s_per_gpu}")


@dataclass(frozen=True, kw_only=True)
class SpeedupPair:
    """A measured pair: model, precisions (the target's may differ), sequence length, the two runs."""

    name: str
    model: str
    precision: str
    target_precision: str
    seq_len: int
    release: str
    source: str
    baseline: RunConfig
    target: RunConfig

    @property
    def measured(self) -> float:
        return self.target.tokens_per_s_per_gpu / self.baseline.tokens_per_s_per_gpu


@dataclass(frozen=True, kw_only=True)
class SpeedupCheck:
    """The model beside one measured pair: predicted tok/s/GPU on each side, both ratios, the error."""

    pair: SpeedupPair
    baseline_tokens_per_s_per_gpu: float
    target_tokens_per_s_per_gpu: float
    baseline_plan: str
    target_plan: str

    @property
    def predicted(self) -> float:
        return self.target_tokens_per_s_per_gpu / self.baseline_tokens_per_s_per_gpu

    @property
    def error(self) -> float:
        return self.predicted / self.pair.measured - 1.0

    def to_dict(self) -> dict:
        return asdict(self) | {
            "measured": self.pair.measured,
            "predicted": self.predicted,
            "error": self.error,
        }


def load_speedup_pairs(path: str | Path | None = None) -> list[SpeedupPair]:
    """Read the measured pairs (the shipped file by default)."""
    d = read_toml(Path(path) if path else data_dir("cost") / "speedups.toml")
    out = []
    for i, p in enumerate(d.get("pair", [])):
        try:
            out.append(
                SpeedupPair(
                    name=p["name"],
                    model=p["model"],
                    precision=p["precision"],
                    target_precision=p.get("target_precision", p["precision"]),
                    seq_len=int(p["seq_len"]),
                    release=str(p.get("release", "")),
                    source=p["source"],
                    baseline=RunConfig(**p["baseline"]),
                    target=RunConfig(**p["target"]),
                )
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"speedups.toml pair {i}: missing or bad field ({exc})") from exc
    return out


def _best(model: str, gpu: str, run: RunConfig, seq_len: int, precision: str) -> tuple[float, str]:
    r = search_training(
        model, gpu, run.num_gpus, seq_len=seq_len, global_batch=run.global_batch, precision=precision, top_k=1
    )
    if not r.top:
        raise Infeasible(f"no layout of {run.num_gpus} {gpu} fits {model} in {precision}")
    return r.top[0].tokens_per_s_per_gpu, r.top[0].layout.describe()


def check_pair(pair: SpeedupPair) -> SpeedupCheck:
    """Run the model at both of the pair's configurations."""
    b, bp = _best(pair.model, pair.baseline.gpu, pair.baseline, pair.seq_len, pair.precision)
    t, tp = _best(pair.model, pair.target.gpu, pair.target, pair.seq_len, pair.target_precision)
    return SpeedupCheck(
        pair=pair,
        baseline_tokens_per_s_per_gpu=b,
        target_tokens_per_s_per_gpu=t,
        baseline_plan=bp,
        target_plan=tp,
    )


def speedup_checks(pairs: list[SpeedupPair] | None = None) -> list[SpeedupCheck]:
    """Every measured pair beside the model (about a second in all)."""
    return [check_pair(p) for p in (pairs if pairs is not None else load_speedup_pairs())]
