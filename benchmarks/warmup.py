"""Compile warm-up against steady step time: when does compiling the quantized operands pay?

For each recipe and each quantization path (eager, compiled), a fresh subprocess with an empty
TORCHINDUCTOR_CACHE_DIR (a cold cache, as a user's first run has) builds the reference trainer and runs
a few training steps. It reports the time to the first step (which, compiled, includes compiling every
operand kernel) and the steady step time (median of the later steps), and the break-even run length:
the step count n at which  first_c + (n - 1) * steady_c  =  first_e + (n - 1) * steady_e.

It then prints what the trainer's default (`quant_backend="auto"`) does for a short and a long run,
before this change (always compiled) and after it (`tenfold.train.trainer.quant_path_for`: eager for
runs under `COMPILE_MIN_STEPS` steps).

    python benchmarks/warmup.py [--recipes mxfp8,nvfp4,fp8_current] [--model small] [--steps 4]
                                [--threads 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time


def child(recipe: str, path: str, model: str, steps: int, threads: int) -> dict[str, float]:
    """Run in the subprocess: build the trainer, time every step."""
    import torch

    from tenfold.train.trainer import TrainConfig, Trainer

    torch.set_num_threads(threads)
    cfg = TrainConfig(recipe=recipe, model=model, steps=steps, quant_backend=path, eval_every=0)
    trainer = Trainer(cfg)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        trainer.train_step()
        times.append(time.perf_counter() - t0)
    return {"first_s": times[0], "steady_s": statistics.median(times[1:])}


def measure(recipe: str, path: str, args: argparse.Namespace) -> dict[str, float]:
    """One cold-cache measurement in a fresh subprocess."""
    with tempfile.TemporaryDirectory(prefix="tenfold-warmup-") as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
        cmd = [
            sys.executable,
            __file__,
            "--child",
            recipe,
            path,
            args.model,
            str(args.steps),
            str(args.threads),
        ]
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def break_even(eager: dict[str, float], comp: dict[str, float]) -> float:
    """Run length from which compiling takes less time in all (inf if compiled steps are not faster)."""
    saved = eager["steady_s"] - comp["steady_s"]
    if saved <= 0:
        return math.inf
    return 1 + max(comp["first_s"] - eager["first_s"], 0.0) / saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipes", default="mxfp8,nvfp4,fp8_current")
    ap.add_argument("--model", default="small")
    ap.add_argument("--steps", type=int, default=4, help="steps per measurement (>= 2)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs=5, metavar=("RECIPE", "PATH", "MODEL", "STEPS", "THREADS"))
    args = ap.parse_args()
    if args.child:
        r, p, m, n, t = args.child
        print(json.dumps(child(r, p, m, int(n), int(t))))
        return
    if args.steps < 2:
        raise ValueError(f"--steps must be >= 2 (a first step and a steady one), got {args.steps}")

    from tenfold.train.trainer import COMPILE_MIN_STEPS

    rows = []
    for recipe in args.recipes.split(","):
        eager = measure(recipe, "eager", args)
        comp = measure(recipe, "compiled", args)
        rows.append(
            {"recipe": recipe, "eager": eager, "compiled": comp, "break_even_steps": break_even(eager, comp)}
        )
    if args.json:
        print(json.dumps({"model": args.model, "threads": args.threads, "rows": rows}, indent=2))
        return
    print(f"cold-cache warm-up, model={args.model}, {args.threads} thread(s), {args.steps} steps per run")
    hdr = f"{'recipe':<13}{'eager 1st':>10}{'eager step':>11}{'comp 1st':>10}{'comp step':>10}"
    hdr += f"{'break-even':>12}"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        e, c = r["eager"], r["compiled"]
        be = r["break_even_steps"]
        print(
            f"{r['recipe']:<13}{e['first_s']:>9.1f}s{e['steady_s']:>10.2f}s{c['first_s']:>9.1f}s"
            f"{c['steady_s']:>9.2f}s{'never' if math.isinf(be) else f'{be:.0f} steps':>12}"
        )
    print(f"\ndefault quant_backend='auto' (COMPILE_MIN_STEPS = {COMPILE_MIN_STEPS}):")
    for steps in (5, 50, 500):
        after = "compiled" if steps >= COMPILE_MIN_STEPS else "eager"
        total = {}
        for path in ("eager", "compiled"):
            total[path] = sum(r[path]["first_s"] + (steps - 1) * r[path]["steady_s"] for r in rows)
        print(
            f"  {steps:>5}-step run: before compiled ({total['compiled']:.0f} s for these recipes), "
            f"after {after} ({total[after]:.0f} s)"
        )


if __name__ == "__main__":
    main()
