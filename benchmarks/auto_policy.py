"""The automatic precision policy against all-NVFP4 and NVIDIA's fixed heuristic, on the reference GPT.

Procedure (issue 4):

1. Train the bf16 baseline (the 4-block, d_model 128 byte-level GPT of `benchmarks/convergence.py`). At
   step `--calib-steps` pause it and run `tenfold.engine.autoprecision.sensitivity(..., gradients=True)` on
   `--calib-batches` calibration batches (training text no run trains on), so that choosing layers never
   looks at the validation batches the comparison is scored on.
2. `auto_policy` at the heuristic's FP4 share of linear-layer GEMM FLOPs, every other layer in bf16 (the
   heuristic's own cost shape), twice: minimising the summed forward loss increase ("loss score"), and
   the summed relative gradient error ("gradient score", which sees the quantized dgrad and wgrad GEMMs).
   `--with-mxfp8` adds the loss-score policy with MXFP8 where MXFP8 alone costs < `--mxfp8-tolerance`.
3. Train, from the same initial weights on the same batches, each of: all linears in NVFP4
   (`nvfp4_no_hp_layers`), NVIDIA's heuristic (`nvfp4`: the last ceil(12.5 % of blocks) in bf16, i.e.
   the last block here) and the automatic policies. The LM head stays bf16 in all of them.
4. Score the final validation loss on the same 48 held-out batches for every run, per seed, and compare
   the policies with the fixed choices paired by seed.

The policies are chosen once (first seed) and reused for the other seeds. Printed: one row per
configuration with its FP4 share, the expected GEMM speedup over bf16 (bits proxy and GB200 peaks), the
final validation loss per seed, its mean and the gap to bf16, then the paired differences. Also writes
`results.json`, `sensitivity.json`, the policy TOML files and `auto_policy.html` under `--out`.

    python benchmarks/auto_policy.py [--steps 500] [--seeds 0,1,2,3] [--threads 2] [--out runs/auto_policy]

About 35 minutes on 2 CPU cores with the defaults (one core's worth of anything else doubles it).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import torch

from _reference import FINAL_EVAL_BATCHES, add_training_args, config, data_path
from tenfold.engine import PrecisionPolicy, SensitivityTable, auto_policy, sensitivity
from tenfold.engine.autoprecision.policy import linear_flops
from tenfold.report.page import Chart, write_html
from tenfold.train import ByteDataset, TrainConfig, Trainer, load_corpus


def formats_of(trainer: Trainer) -> dict[str, str]:
    """The format each linear layer of a trainer's model actually runs in (read from the modules)."""
    from tenfold.engine import QuantLinear

    out = {}
    for name, m in trainer.model.named_modules():
        if isinstance(m, QuantLinear):
            fam = m.recipe.name
            out[name] = "nvfp4" if fam.startswith("nvfp4") else "mxfp8" if fam.startswith("mxfp8") else fam
        elif isinstance(m, torch.nn.Linear):
            out[name] = "bf16"
    return out


def train(cfg: TrainConfig, data: ByteDataset, log: str, t_start: float) -> dict:
    t0 = time.perf_counter()
    tr = Trainer(cfg, dataset=data)
    res = tr.run()
    final = tr.evaluate(FINAL_EVAL_BATCHES)
    fmts = formats_of(tr)
    print(
        f"[{time.perf_counter() - t_start:6.0f} s] {log:<26} seed {cfg.seed}: final val loss {final:.4f} "
        f"({time.perf_counter() - t0:.0f} s)",
        flush=True,
    )
    return {
        "final_val_loss": final,
        "evals": [(e["step"], e["val_loss"]) for e in res.evals],
        "formats": fmts,
        "wall_s": time.perf_counter() - t0,
    }


def baseline_and_sensitivity(args: argparse.Namespace, data: ByteDataset, t_start: float):
    """The bf16 run of seed 0, paused at `calib_steps` for the sensitivity measurement."""
    cfg = config(args, args.seeds[0], recipe="bf16")
    tr = Trainer(cfg, dataset=data)
    t0 = time.perf_counter()
    while tr.step < args.calib_steps:
        tr.train_step()
    seq = cfg.gpt_config().seq_len
    calib = data.calibration_batches(args.calib_batches, cfg.batch_size, seq, cfg.seed)
    ts = time.perf_counter()
    table = sensitivity(tr.model, calib, candidates=("nvfp4", "mxfp8"), gradients=True)
    sens_s = time.perf_counter() - ts
    print(
        f"[{time.perf_counter() - t_start:6.0f} s] sensitivity at step {tr.step}: {len(table.rows)} rows "
        f"in {sens_s:.0f} s (base loss {table.base_loss:.4f})",
        flush=True,
    )
    res = tr.run()
    final = tr.evaluate(FINAL_EVAL_BATCHES)
    print(
        f"[{time.perf_counter() - t_start:6.0f} s] {'bf16':<26} seed {cfg.seed}: final val loss {final:.4f} "
        f"({time.perf_counter() - t0:.0f} s incl. sensitivity)",
        flush=True,
    )
    run = {"final_val_loss": final, "evals": [(e["step"], e["val_loss"]) for e in res.evals]}
    run["formats"] = formats_of(tr)
    return run, table, sens_s


def fp4_fraction(formats: dict[str, str], flops: dict[str, float]) -> float:
    return PrecisionPolicy(layers=formats).fp4_flop_fraction(flops)


def speedups(formats: dict[str, str], flops: dict[str, float]) -> tuple[float, float]:
    pp = PrecisionPolicy(layers=formats, flops={n: flops[n] for n in formats})
    return pp.expected_speedup(None), pp.expected_speedup("gb200")


COLORS = {
    "all nvfp4": "#d62728",
    "NVIDIA heuristic": "#ff7f0e",
    "auto, loss score": "#2ca02c",
    "auto, gradient score": "#9467bd",
    "auto, loss, rest mxfp8": "#1f77b4",
}


def plot(rows: list[dict], base: dict, path: Path, title: str) -> None:
    """Two charts in one self-contained HTML page (tenfold.report, plotly): each seed's gap to its own bf16
    run per configuration (one line per seed, so the pairing shows), and the mean gap per configuration
    with its FP4 share."""
    seeds = list(base)
    names = [r["name"] for r in rows]
    per_seed = []
    for s in seeds:
        b = base[s]["final_val_loss"]
        gaps = [100 * (r["runs"][s]["final_val_loss"] - b) / b for r in rows]
        per_seed.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": f"seed {s}",
                "x": names,
                "y": gaps,
                "line": {"color": "#8c8c8c", "width": 1},
                "marker": {"color": [COLORS.get(n, "#000000") for n in names], "size": 9},
            }
        )
    mean_b = sum(base[s]["final_val_loss"] for s in seeds) / len(seeds)
    means = [100 * (r["mean"] - mean_b) / mean_b for r in rows]
    bars = {
        "type": "bar",
        "orientation": "h",
        "x": means,
        "y": names,
        "marker": {"color": [COLORS.get(n, "#000000") for n in names]},
        "text": [
            f"{g:+.2f} %, FP4 {100 * r['fp4_fraction']:.0f} %" for g, r in zip(means, rows, strict=True)
        ],
        "textposition": "outside",
        "cliponaxis": False,
    }
    axis = "final validation loss vs the same seed's bf16 run (%)"
    charts = [
        Chart(
            key="per_seed",
            title="Per seed: each line one seed (same initial weights and batches)",
            reading="A configuration is better than another only if it is lower in most seeds.",
            figure={"data": per_seed, "layout": {"yaxis": {"title": {"text": axis}}, "showlegend": True}},
        ),
        Chart(
            key="mean_gap",
            title=f"Mean gap to bf16 over {len(seeds)} seed(s) (lower is better)",
            reading="The FP4 share of GEMM FLOPs is printed beside each bar.",
            figure={
                "data": [bars],
                "layout": {
                    "xaxis": {
                        "title": {"text": "mean final validation loss vs bf16 (%)"},
                        "range": [min(0.0, *means) * 1.3, max(0.0, *means) * 1.5 + 0.05],  # room for labels
                    },
                    "yaxis": {"autorange": "reversed"},
                    "margin": {"l": 170},
                },
            },
        ),
    ]
    write_html(path, title=title, charts=charts)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_training_args(ap)
    ap.add_argument(
        "--seeds", default="0,1,2,3", help="comma-separated seeds (the policy is chosen on the first)"
    )
    ap.add_argument("--calib-steps", type=int, default=200, help="bf16 steps before the sensitivity pass")
    ap.add_argument("--calib-batches", type=int, default=16)
    ap.add_argument("--mxfp8-tolerance", type=float, default=0.01, help="max loss increase for MXFP8")
    ap.add_argument(
        "--with-mxfp8", action="store_true", help="also the loss-score policy with MXFP8 elsewhere"
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="runs/auto_policy")
    args = ap.parse_args()
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    if not args.seeds:
        raise SystemExit("--seeds is empty")
    if not 0 < args.calib_steps <= args.steps:
        raise SystemExit(f"--calib-steps must be in (0, steps], got {args.calib_steps}")
    return args


def write_policies(args: argparse.Namespace, table: SensitivityTable, fit: dict, out: Path) -> dict[str, str]:
    """The automatic policies (name -> saved TOML path), chosen from the sensitivity table."""
    policies = {  # name -> (file stem, policy)
        "auto, loss score": ("auto_loss", auto_policy(table.deltas("loss"), **fit, mxfp8_tolerance=-1.0)),
        "auto, gradient score": (
            "auto_gradient",
            auto_policy(table.deltas("gradient"), **fit, mxfp8_tolerance=-1.0),
        ),
    }
    if args.with_mxfp8:
        tol = args.mxfp8_tolerance
        policies["auto, loss, rest mxfp8"] = (
            "auto_loss_mxfp8",
            auto_policy(table.deltas("loss"), **fit, mxfp8_tolerance=tol),
        )
    files = {}
    for name, (stem, pol) in policies.items():
        files[name] = str(pol.save(out / f"{stem}.toml"))
        print(
            f"{name}: kept out of FP4: "
            + ", ".join(f"{n}={f}" for n, f in pol.layers.items() if f != "nvfp4")
        )
    return files


def print_table(args: argparse.Namespace, rows: list[dict], base: dict, sens_s: float) -> None:
    """Final validation loss per configuration and seed, beside bf16."""
    b = {s: base[s]["final_val_loss"] for s in args.seeds}
    bmean = sum(b.values()) / len(b)
    seed_cols = "".join(f"  seed {s:<3}" for s in args.seeds)
    print(
        f"\nfinal validation loss ({FINAL_EVAL_BATCHES} held-out batches), {args.steps} steps, "
        f"policy chosen at bf16 step {args.calib_steps} on {args.calib_batches} training batches "
        f"(sensitivity {sens_s:.0f} s); FP4 fraction = share of linear-layer GEMM FLOPs (LM head bf16)"
    )
    print(
        f"{'configuration':<20} {'FP4 FLOPs':>9} {'GEMM x (proxy)':>14} {'x (GB200)':>9}{seed_cols}"
        f"  {'mean':>7}  {'vs bf16':>8}"
    )
    print(
        f"{'bf16':<20} {'0.0 %':>9} {1.0:>14.2f} {1.0:>9.2f}"
        + "".join(f"  {b[s]:8.4f}" for s in args.seeds)
        + f"  {bmean:7.4f}  {'':>8}"
    )
    for r in rows:
        cells = "".join(f"  {r['runs'][s]['final_val_loss']:8.4f}" for s in args.seeds)
        print(
            f"{r['name']:<20} {100 * r['fp4_fraction']:>7.1f} % {r['speedup_proxy']:>14.2f} "
            f"{r['speedup_gb200']:>9.2f}{cells}  {r['mean']:7.4f}  {100 * (r['mean'] - bmean) / bmean:+7.2f}%"
        )


def print_paired(args: argparse.Namespace, rows: list[dict]) -> None:
    """Each automatic policy against each fixed choice, paired by seed, with the standard error."""
    by = {r["name"]: r for r in rows}
    for auto_name, other in [
        (a, o)
        for a in ("auto, loss score", "auto, gradient score")
        for o in ("all nvfp4", "NVIDIA heuristic")
    ]:
        auto = by[auto_name]
        diffs = [
            auto["runs"][s]["final_val_loss"] - by[other]["runs"][s]["final_val_loss"] for s in args.seeds
        ]
        mean = sum(diffs) / len(diffs)
        se = (
            (sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1) / len(diffs)) ** 0.5
            if len(diffs) > 1
            else 0
        )
        print(
            f"{auto_name} - {other}, paired by seed: {', '.join(f'{d:+.4f}' for d in diffs)}; "
            f"mean {mean:+.4f} +- {se:.4f} (standard error), "
            f"lower in {sum(d < 0 for d in diffs)} of {len(diffs)}"
        )


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    path = data_path(args.data)
    data = ByteDataset.from_bytes(load_corpus(path))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()

    base = {}
    base[args.seeds[0]], table, sens_s = baseline_and_sensitivity(args, data, t_start)
    (out / "sensitivity.json").write_text(json.dumps(table.to_dict(), indent=1))
    print(table.format(limit=12))

    heur = Trainer(config(args, args.seeds[0], recipe="nvfp4", steps=1), dataset=data)
    heur_formats = formats_of(heur)
    flops_all = linear_flops(heur.model)
    layers = [r.layer for r in table.rows_for("nvfp4")]
    flops = {n: flops_all[n] for n in layers}
    target = fp4_fraction({n: heur_formats[n] for n in layers}, flops)
    files = write_policies(args, table, {"flops": flops, "fp4_flop_fraction": target}, out)

    configs = [
        ("all nvfp4", {"recipe": "nvfp4_no_hp_layers"}),
        ("NVIDIA heuristic", {"recipe": "nvfp4"}),
        *[(name, {"policy": files[name]}) for name in files],
    ]
    rows = []
    for name, kw in configs:
        runs = {}
        for seed in args.seeds:
            runs[seed] = train(config(args, seed, **kw), data, name, t_start)
            if seed not in base:
                base[seed] = train(config(args, seed, recipe="bf16"), data, "bf16", t_start)
        fmts = {n: runs[args.seeds[0]]["formats"][n] for n in layers}
        s_proxy, s_gb200 = speedups(fmts, flops)
        mean = sum(r["final_val_loss"] for r in runs.values()) / len(runs)
        rows.append(
            {
                "name": name,
                "fp4_fraction": fp4_fraction(fmts, flops),
                "speedup_proxy": s_proxy,
                "speedup_gb200": s_gb200,
                "runs": runs,
                "mean": mean,
                "formats": fmts,
            }
        )
        (out / "results.json").write_text(json.dumps({"rows": rows, "bf16": base}, indent=1))

    print_table(args, rows, base, sens_s)
    print_paired(args, rows)
    plot(
        rows,
        base,
        out / "auto_policy.html",
        f"automatic precision policy vs fixed choices: 4x128 GPT, {args.steps} steps, "
        f"{len(args.seeds)} seed(s)",
    )
    print(f"wrote {out / 'results.json'}, {out / 'auto_policy.html'}, policies {', '.join(files.values())}")


if __name__ == "__main__":
    main()
