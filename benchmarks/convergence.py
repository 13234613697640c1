"""Convergence of every recipe against the bf16 baseline: same model, seed, data and batches for all.

A 4-block byte-level GPT (d_model 128, SwiGLU 384, RoPE, 128-token context) is trained for `--steps`
steps on `../shared/data/tinyshakespeare.txt` when present (else on the embedded standard-library
corpus). Every recipe starts from the same initial weights and sees the same batches in the same order;
only the GEMM numerics differ. The final validation loss is measured on the same 48 held-out batches
(~98k tokens) for every recipe, so differences between recipes are paired. A second bf16 run with
another seed (`bf16 seed+1`) shows how far two equally good runs land apart at this scale.

Literature expectations (issue 3; arXiv 2506.08027, 2509.25149): mxfp8 within ~0.5 % of the baseline,
mxfp8_floor no better than mxfp8, nvfp4 within ~2 % and better than each ablation and than mxfp4.

    python benchmarks/convergence.py [--steps 500] [--threads 1] [--out runs/convergence] [--json]

About 30 minutes on 2 CPU cores with the defaults (one thread, so another process can use the other
core without the oversubscription that slows OpenMP kernels many times over); `--threads 2` on an idle
machine halves that.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import torch

from _reference import FINAL_EVAL_BATCHES, MODEL, add_training_args, data_path
from tenfold.engine import RECIPE_NAMES
from tenfold.report.runs import Run, runs_report_html
from tenfold.train import ByteDataset, TrainConfig, Trainer, load_corpus


def run_one(name: str, seed: int, data: ByteDataset, args: argparse.Namespace) -> dict:
    cfg = TrainConfig(
        recipe=name,
        **MODEL,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup_steps=args.warmup,
        eval_every=args.eval_every,
        eval_batches=8,
        seed=seed,
    )
    t0 = time.perf_counter()
    trainer = Trainer(cfg, dataset=data)
    res = trainer.run()
    final = trainer.evaluate(FINAL_EVAL_BATCHES)
    return {
        "recipe": name,
        "seed": seed,
        "final_val_loss": final,
        "final_train_loss": sum(r["loss"] for r in res.steps[-50:]) / len(res.steps[-50:]),
        "steps": [r["step"] for r in res.steps],
        "losses": [r["loss"] for r in res.steps],
        "evals": [(e["step"], e["val_loss"]) for e in res.evals],
        "tokens_per_s": res.tokens_per_s,
        "wall_s": time.perf_counter() - t0,
        "quantized_layers": len(res.conversion.converted),
        "hp_blocks": list(res.conversion.hp_blocks),
    }


def plot(results: list[dict], path: Path, title: str) -> None:
    """The loss curves (smoothed training loss, validation points) and a table of the runs, as the
    self-contained HTML report of `tenfold report` (tenfold.report.runs)."""
    runs = []
    for r in results:
        label = r["recipe"] if r["seed"] == results[0]["seed"] else f"{r['recipe']} (seed {r['seed']})"
        val = dict(r["evals"])
        rows = tuple(
            {"step": s, "loss": loss, **({"val_loss": val[s]} if s in val else {})}
            for s, loss in zip(r["steps"], r["losses"], strict=True)
        )
        summary = {k: r[k] for k in ("final_val_loss", "tokens_per_s", "wall_s")}
        runs.append(Run(name=label, path=path.parent, steps=rows, summary=summary))
    path.write_text(runs_report_html(runs, title=title), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_training_args(ap)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--recipes", default=",".join(RECIPE_NAMES))
    ap.add_argument("--no-control", action="store_true", help="skip the second-seed bf16 run")
    ap.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: robust when another process shares the CPU)"
    )
    ap.add_argument("--out", default="runs/convergence")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    path = data_path(args.data)
    data = ByteDataset.from_bytes(load_corpus(path))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = [n for n in args.recipes.split(",") if n]
    if "bf16" not in names:
        names = ["bf16", *names]
    runs = [(n, args.seed) for n in names] + ([] if args.no_control else [("bf16", args.seed + 1)])
    corpus = path.name if path else "stdlib source"
    t_start = time.perf_counter()
    results = []
    for name, seed in runs:
        r = run_one(name, seed, data, args)
        results.append(r)
        print(
            f"[{time.perf_counter() - t_start:7.0f} s] {name:<20} seed {seed}: final val loss "
            f"{r['final_val_loss']:.4f} ({r['wall_s']:.0f} s, {r['tokens_per_s']:,.0f} tok/s)",
            flush=True,
        )
        (out / "results.json").write_text(json.dumps(results))
    base = next(r for r in results if r["recipe"] == "bf16" and r["seed"] == args.seed)["final_val_loss"]
    for r in results:
        r["gap_pct"] = 100 * (r["final_val_loss"] - base) / base
    tokens = args.steps * args.batch_size * MODEL["seq_len"]
    title = (
        f"{corpus}: byte-level GPT {MODEL['n_layers']}x{MODEL['d_model']} (SwiGLU {MODEL['d_ff']}), "
        f"{args.steps} steps x {args.batch_size * MODEL['seq_len']} tokens, seed {args.seed}"
    )
    plot(results, out / "convergence.html", title)
    (out / "results.json").write_text(json.dumps(results))
    meta = {
        "data": corpus,
        "data_bytes": len(data.data),
        "model": MODEL,
        "steps": args.steps,
        "tokens": tokens,
        "threads": torch.get_num_threads(),
        "wall_s": time.perf_counter() - t_start,
        "plot": str(out / "convergence.html"),
    }
    if args.json:
        rows = [{k: v for k, v in r.items() if k not in ("steps", "losses", "evals")} for r in results]
        print(json.dumps({"meta": meta, "rows": rows}, indent=2))
        return
    print(f"\nconvergence, {title}; {tokens:,} tokens; {meta['wall_s']:.0f} s; plot {meta['plot']}")
    hdr = f"{'recipe':<24}{'val loss':>10}{'vs bf16':>10}{'train loss':>12}{'q layers':>10}{'HP blocks':>11}"
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        label = r["recipe"] if r["seed"] == args.seed else f"{r['recipe']} (seed {r['seed']})"
        print(
            f"{label:<24}{r['final_val_loss']:>10.4f}{r['gap_pct']:>+9.2f}%{r['final_train_loss']:>12.4f}"
            f"{r['quantized_layers']:>10}{r['hp_blocks'] or '-'!s:>11}"
        )


if __name__ == "__main__":
    main()
