"""What the training benchmarks share: the reference GPT's shape, its data and its training options.

`convergence.py` and `auto_policy.py` train the same 4-block, d_model 128 byte-level GPT on the same data
with the same schedule, so their figures can be read side by side."""

from __future__ import annotations

import argparse
from pathlib import Path

from tenfold.train import TrainConfig

SHAKESPEARE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare.txt"
MODEL = {"model": "small", "n_layers": 4, "d_model": 128, "n_heads": 4, "d_ff": 384, "seq_len": 128}
FINAL_EVAL_BATCHES = 48  # held-out validation batches (~98k tokens) every run is scored on


def data_path(arg: str | None) -> Path | None:
    """The text to train on: `arg`, else tinyshakespeare when it lies beside the checkout, else None
    (the trainer's embedded standard-library corpus)."""
    if arg:
        return Path(arg)
    for p in (SHAKESPEARE, Path("/work/shared/data/tinyshakespeare.txt")):
        if p.is_file():
            return p
    return None


def add_training_args(ap: argparse.ArgumentParser, *, steps: int = 500) -> None:
    """The schedule options both benchmarks take, with the same defaults (`steps`: the --steps default)."""
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--data", default=None, help="text file (default: tinyshakespeare, else stdlib source)")


def config(args: argparse.Namespace, seed: int, **kw: object) -> TrainConfig:
    """The reference GPT's training configuration from the shared options, for one seed; `kw` overrides."""
    base = {
        **MODEL,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "warmup_steps": args.warmup,
        "eval_every": args.eval_every,
        "seed": seed,
    }
    return TrainConfig(**{**base, **kw})
