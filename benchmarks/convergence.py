"""Convergence of recipes against the bf16 baseline, paired over several seeds.

A 4-block byte-level GPT (d_model 128, SwiGLU 384, RoPE, 128-token context) is trained for `--steps`
steps on `../shared/data/tinyshakespeare.txt` when present (else on the embedded standard-library
corpus). For each seed s, bf16 and every recipe start from the same initial weights, see the same batches
in the same order and are scored on the same 48 held-out batches (~98k tokens); only the GEMM numerics
differ. So d_s = loss(recipe, s) - loss(bf16, s) is a paired difference, and the table reports its mean
over seeds with its standard error and a Student-t 95 % interval (t_0.975 = 4.30 with 3 seeds, not 2):
"indistinguishable" when that interval contains 0, else "worse" or "better". The bf16 row shows the seed
spread (sample std over seeds) of the baseline itself: how far two equally good runs land apart.

Recipes are names or names with field overrides (parsed as int, float, bool, else text):

    python benchmarks/convergence.py --recipes bf16,nvfp4,nvfp4:hp_tail=0.25,mxfp4 --seeds 0,1,2

Every run is cached in `<out>/results.json` under its (recipe spec, seed, steps, batch size, lr, warm-up,
eval interval, model, data); a rerun with more recipes or seeds trains only the missing runs. Seeds can
train in parallel processes, each with its own `--out`; `--merge dir1,dir2` then reuses their runs.

Literature expectations (issue 3; arXiv 2506.08027, 2509.25149): mxfp8 within ~0.5 % of the baseline,
nvfp4 within ~2 % and better than its ablations and than mxfp4. Resolution: at 150 steps the
paired SE was 0.15-0.4 % of the loss with 3 seeds (the per-seed differences scatter about as much as
bf16's own seed spread), so the 95 % interval was about +-0.7-1.6 % and even mxfp4's +1.5 % read
"indistinguishable"; with 5 seeds (t_0.975 = 2.78) it was +-0.4-0.6 %, and nvfp4 (+0.47 %) and mxfp4
(+1.63 %) read "worse".

    python benchmarks/convergence.py [--steps 300] [--seeds 0,1,2] [--threads 1] [--out runs/convergence]

Runtime (measured 2026-12-04, one thread per process, on 2 cores shared with other work): the 6 core
recipes x 3 seeds at `--steps 150` (18 runs) cost 1,207 CPU-seconds in all (47 s per bf16 run, 51-72 s
per fp8/mxfp8/mxfp4 run, 75-112 s per nvfp4 run, each including the 48-batch final evaluation); they took
34 min of wall time in 1-3 parallel processes under a load average of 3-11; on a nearly idle machine one
seed of 7 recipes took 8.5 min. The 300-step default costs about 1.9x that: ~38 min on one idle core.
One thread per process avoids the oversubscription that slows OpenMP kernels many times over when other
processes share the CPU.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from _reference import FINAL_EVAL_BATCHES, MODEL, add_training_args, data_path
from tenfold.report.page import HtmlTable, render_html
from tenfold.report.runs import Run, run_charts, runs_table
from tenfold.stats import paired_difference, sample_std
from tenfold.train import ByteDataset, TrainConfig, Trainer, load_corpus
from tenfold.train.compare import format_recipe_spec, parse_recipe_spec, split_specs

CORE = "bf16,fp8_current,fp8_block,mxfp8,nvfp4,mxfp4"
CACHE_VERSION = 1


def run_key(spec: str, seed: int, args: argparse.Namespace, corpus: str, n_bytes: int) -> dict[str, Any]:
    """What a cached run must match to be reused."""
    return {
        "spec": spec,
        "seed": seed,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "warmup": args.warmup,
        "eval_every": args.eval_every,
        "model": MODEL,
        "data": corpus,
        "data_bytes": n_bytes,
        "final_eval_batches": FINAL_EVAL_BATCHES,
    }


def run_one(spec: str, seed: int, data: ByteDataset, args: argparse.Namespace) -> dict[str, Any]:
    name, options = parse_recipe_spec(spec)
    cfg = TrainConfig(
        recipe=name,
        recipe_options=options,
        **MODEL,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup_steps=args.warmup,
        eval_every=args.eval_every,
        eval_batches=8,
        seed=seed,
    )
    t0, c0 = time.perf_counter(), time.process_time()
    trainer = Trainer(cfg, dataset=data)
    res = trainer.run()
    final = trainer.evaluate(FINAL_EVAL_BATCHES)
    tail = res.steps[-50:]
    return {
        "recipe": spec,
        "seed": seed,
        "final_val_loss": final,
        "final_train_loss": sum(r["loss"] for r in tail) / len(tail),
        "steps": [r["step"] for r in res.steps],
        "losses": [r["loss"] for r in res.steps],
        "evals": [(e["step"], e["val_loss"]) for e in res.evals],
        "tokens_per_s": res.tokens_per_s,
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,  # what the run costs whatever else shares the machine
        "quantized_layers": len(res.conversion.converted),
        "hp_blocks": list(res.conversion.hp_blocks),
    }


def load_cache(path: Path) -> list[dict[str, Any]]:
    """The cached runs of an earlier invocation (an older or unreadable file counts as empty)."""
    if not path.is_file():
        return []
    try:
        blob = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return []
    if not isinstance(blob, dict) or blob.get("version") != CACHE_VERSION:
        return []
    return list(blob.get("runs", []))


def paired_rows(specs: list[str], seeds: list[int], results: dict[tuple[str, int], dict]) -> list[dict]:
    """One row per recipe: mean loss, and the paired difference to bf16 over the seeds both have."""
    base = {s: results[("bf16", s)]["final_val_loss"] for s in seeds if ("bf16", s) in results}
    rows = []
    for spec in specs:
        mine = {s: results[(spec, s)] for s in seeds if (spec, s) in results}
        losses = [r["final_val_loss"] for r in mine.values()]
        row: dict[str, Any] = {
            "recipe": spec,
            "seeds": sorted(mine),
            "mean_val_loss": sum(losses) / len(losses) if losses else math.nan,
            "seed_std": sample_std(losses),
            "quantized_layers": next(iter(mine.values()))["quantized_layers"] if mine else 0,
        }
        both = [s for s in sorted(mine) if s in base]
        if spec != "bf16" and both:
            d = paired_difference([mine[s]["final_val_loss"] for s in both], [base[s] for s in both])
            pct = paired_difference(
                [100 * (mine[s]["final_val_loss"] - base[s]) / base[s] for s in both], [0.0] * len(both)
            )
            row.update(
                paired_seeds=both,
                d_mean=d.mean,
                d_se=d.se,
                d_ci95=[d.low, d.high],
                pct_mean=pct.mean,
                pct_se=pct.se,
                verdict=d.verdict,
            )
        rows.append(row)
    return rows


def fmt_pm(mean: float, se: float, spec: str) -> str:
    return f"{mean:{spec}}" + ("" if math.isnan(se) else f" ± {se:{spec.lstrip('+')}}")


def table_cells(row: dict[str, Any]) -> tuple[str, ...]:
    std = "" if math.isnan(row["seed_std"]) else f"{row['seed_std']:.4f}"
    head = (row["recipe"], str(len(row["seeds"])), f"{row['mean_val_loss']:.4f}", std)
    if "d_mean" not in row:
        return (*head, "", "", "", "baseline" if row["recipe"] == "bf16" else "no bf16 pair")
    lo, hi = row["d_ci95"]
    ci = "" if math.isnan(lo) else f"[{lo:+.4f}, {hi:+.4f}]"
    return (
        *head,
        fmt_pm(row["d_mean"], row["d_se"], "+.4f"),
        fmt_pm(row["pct_mean"], row["pct_se"], "+.2f") + " %",
        ci,
        row["verdict"],
    )


COLUMNS = (
    "recipe",
    "seeds",
    "val loss",
    "seed std",
    "Δ vs bf16 ± SE",
    "Δ % ± SE",
    "Δ 95 % CI (t)",
    "verdict",
)


def write_report(results: list[dict], rows: list[dict], path: Path, title: str) -> None:
    """Self-contained HTML: the paired table, the loss curves and the per-run table (tenfold.report)."""
    runs = []
    for r in results:
        val = dict(r["evals"])
        steps = tuple(
            {"step": s, "loss": loss, **({"val_loss": val[s]} if s in val else {})}
            for s, loss in zip(r["steps"], r["losses"], strict=True)
        )
        summary = {k: r[k] for k in ("final_val_loss", "tokens_per_s", "wall_s")}
        summary["converted_layers"] = r["quantized_layers"]
        runs.append(
            Run(name=f"{r['recipe']} (seed {r['seed']})", path=path.parent, steps=steps, summary=summary)
        )
    paired = HtmlTable(
        caption="Final validation loss, paired with bf16 per seed",
        columns=COLUMNS,
        rows=tuple(table_cells(r) for r in rows),
        notes=(
            "Δ = loss(recipe, seed) − loss(bf16, seed), mean ± standard error over seeds; the 95 % interval "
            "uses Student's t with n−1 degrees of freedom; 'indistinguishable' when it contains 0. "
            "Seed std: the sample standard deviation of the recipe's own loss over seeds.",
        ),
    )
    path.write_text(render_html(title=title, charts=run_charts(runs), tables=[paired, runs_table(runs)]))


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_training_args(ap, steps=300)
    ap.add_argument(
        "--seeds", default="0,1,2", help="comma-separated seeds; each pairs bf16 with every recipe"
    )
    ap.add_argument(
        "--recipes", default=CORE, help="names or name:field=value,... specs (bf16 is always added)"
    )
    ap.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: robust when another process shares the CPU)"
    )
    ap.add_argument("--out", default="runs/convergence")
    ap.add_argument(
        "--merge",
        default="",
        help="comma-separated out dirs of other invocations (e.g. one process per seed) whose runs to reuse",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        args.seed_list = sorted({int(s) for s in args.seeds.split(",") if s.strip()})
    except ValueError:
        ap.error(f"--seeds {args.seeds!r}: expected comma-separated integers")
    if not args.seed_list:
        ap.error("--seeds: need at least one seed")
    try:
        specs = [format_recipe_spec(*parse_recipe_spec(s)) for s in split_specs(args.recipes)]
        for spec in specs:  # fail on a bad name or option now, not after an hour of training
            name, options = parse_recipe_spec(spec)
            TrainConfig(recipe=name, recipe_options=options)
    except ValueError as err:
        ap.error(f"--recipes: {err}")
    args.specs = list(dict.fromkeys(["bf16", *specs]))
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    path = data_path(args.data)
    data = ByteDataset.from_bytes(load_corpus(path))
    corpus = path.name if path else "stdlib source"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache_path = out / "results.json"
    cache = load_cache(cache_path)
    for other in (d for d in args.merge.split(",") if d):
        cache += [
            c for c in load_cache(Path(other) / "results.json") if all(c["key"] != h["key"] for h in cache)
        ]
    t_start = time.perf_counter()
    results: dict[tuple[str, int], dict] = {}
    for seed in args.seed_list:  # seed-major: an interrupted run still leaves complete pairs
        for spec in args.specs:
            key = run_key(spec, seed, args, corpus, len(data.data))
            hit = next((c["result"] for c in cache if c["key"] == key), None)
            if hit is None:
                hit = run_one(spec, seed, data, args)
                cache.append({"key": key, "result": hit})
                cache_path.write_text(json.dumps({"version": CACHE_VERSION, "runs": cache}))
                print(
                    f"[{time.perf_counter() - t_start:7.0f} s] {spec:<28} seed {seed}: final val loss "
                    f"{hit['final_val_loss']:.4f} ({hit['wall_s']:.0f} s, CPU {hit['cpu_s']:.0f} s)",
                    flush=True,
                )
            results[(spec, seed)] = hit
    cache_path.write_text(json.dumps({"version": CACHE_VERSION, "runs": cache}))  # merged runs included
    rows = paired_rows(args.specs, args.seed_list, results)
    tokens = args.steps * args.batch_size * MODEL["seq_len"]
    title = (
        f"{corpus}: byte-level GPT {MODEL['n_layers']}x{MODEL['d_model']} (SwiGLU {MODEL['d_ff']}), "
        f"{args.steps} steps x {args.batch_size * MODEL['seq_len']} tokens, seeds {args.seeds}"
    )
    write_report(list(results.values()), rows, out / "convergence.html", title)
    meta = {
        "data": corpus,
        "data_bytes": len(data.data),
        "model": MODEL,
        "steps": args.steps,
        "seeds": args.seed_list,
        "tokens": tokens,
        "threads": torch.get_num_threads(),
        "wall_s": time.perf_counter() - t_start,
        "trained_wall_s": sum(r["wall_s"] for r in results.values()),
        "trained_cpu_s": sum(r.get("cpu_s", math.nan) for r in results.values()),
        "plot": str(out / "convergence.html"),
    }
    (out / "summary.json").write_text(json.dumps({"meta": meta, "paired": rows}, indent=2))
    if args.json:
        print(json.dumps({"meta": meta, "paired": rows}, indent=2))
        return
    print(
        f"\nconvergence, {title}; {tokens:,} tokens per run; {meta['wall_s']:.0f} s this call "
        f"({meta['trained_wall_s']:.0f} s, CPU {meta['trained_cpu_s']:.0f} s of training in the table); "
        f"plot {meta['plot']}"
    )
    widths = (30, 6, 10, 10, 20, 18, 22, 18)
    print("".join(f"{c:<{w}}" for c, w in zip(COLUMNS, widths, strict=True)))
    print("-" * sum(widths))
    for row in rows:
        print("".join(f"{c:<{w}}" for c, w in zip(table_cells(row), widths, strict=True)))
    print("Δ: paired per seed; CI: Student-t 95 % (n-1 dof); indistinguishable when the CI contains 0")


if __name__ == "__main__":
    main()
