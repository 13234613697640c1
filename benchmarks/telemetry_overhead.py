"""Cost of the telemetry Recorder: training time with and without it, in one run, as a ratio.

Two `Trainer`s with the same recipe, model, data and seed; one carries a `Recorder` writing JSONL and
TensorBoard files at the given sampling interval (default: the Recorder's own, every 100 steps). Steps
alternate between the two so that load from other processes hits both alike. Sampled steps are spikes,
so the total time over whole sampling periods is compared, not a median. Target (issue 4): overhead
<= 10 % at the default interval.

    python benchmarks/telemetry_overhead.py [--recipe nvfp4] [--model tiny] [--steps 100] [--every 100]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings

import torch

from tenfold.engine.telemetry.recorder import Recorder
from tenfold.engine.telemetry.records import DEFAULT_EVERY
from tenfold.train import ByteDataset, TrainConfig, Trainer, stdlib_corpus


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", default="nvfp4")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--steps", type=int, default=100, help="timed steps per trainer (whole periods)")
    ap.add_argument("--every", type=int, default=DEFAULT_EVERY)
    ap.add_argument("--what-if", default="", help="comma-separated what-if recipes for the recorder")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    data = ByteDataset.from_bytes(stdlib_corpus(1 << 21))
    cfg = TrainConfig(recipe=args.recipe, model=args.model, steps=args.steps + 2, eval_every=0)
    what_if = tuple(n for n in args.what_if.split(",") if n)
    with tempfile.TemporaryDirectory() as out:
        rec = Recorder(out, every=args.every, what_if=what_if, keep=False)
        plain, rec_t = Trainer(cfg, dataset=data), Trainer(cfg, dataset=data, recorder=rec)
        for t in (plain, rec_t):  # warm-up (and the recorder's first sample, step 0) outside the timing
            t.train_step()
        times = {"plain": 0.0, "recorder": 0.0}
        for _ in range(args.steps):
            for name, t in (("plain", plain), ("recorder", rec_t)):
                t0 = time.perf_counter()
                t.train_step()
                times[name] += time.perf_counter() - t0
        rec.close()
    ratio = times["recorder"] / times["plain"]
    row = {
        "recipe": args.recipe,
        "model": args.model,
        "steps": args.steps,
        "every": args.every,
        "what_if": list(what_if),
        "plain_s": times["plain"],
        "recorder_s": times["recorder"],
        "overhead": ratio - 1.0,
        "target": 0.10,
        "met": ratio - 1.0 <= 0.10,
        "threads": torch.get_num_threads(),
    }
    if args.json:
        print(json.dumps(row, indent=2))
        return
    print(
        f"telemetry recorder overhead: {args.recipe}, model {args.model}, {args.steps} steps, "
        f"sampled every {args.every}, what-if {list(what_if) or 'none'}, {row['threads']} threads"
    )
    print(f"{'without s':>10}{'with s':>10}{'ratio':>8}{'overhead':>10}{'target':>9}{'met':>5}")
    print(
        f"{times['plain']:>10.2f}{times['recorder']:>10.2f}{ratio:>7.3f}x{ratio - 1:>+10.1%}"
        f"{'<= 10%':>9}{'yes' if row['met'] else 'NO':>5}"
    )


if __name__ == "__main__":
    main()
