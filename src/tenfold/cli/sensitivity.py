"""`tenfold sensitivity RUN_DIR`: rank a trained run's layers by what each format costs; write a policy."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tenfold.cli.output import check_writable_dir

if TYPE_CHECKING:  # the engine needs torch: imported inside the command only
    from tenfold.engine.autoprecision.policy import PrecisionPolicy
    from tenfold.engine.autoprecision.sensitivity import SensitivityTable


def _check_numbers(
    batches: int,
    probe_steps: int,
    max_seconds: float,
    top: int,
    fp4_fraction: float | None,
    max_loss_increase: float | None,
) -> None:
    """ValueError naming the first option out of its range."""
    if batches < 1:
        raise ValueError(f"--batches must be >= 1, got {batches}")
    if probe_steps < 1:
        raise ValueError(f"--probe-steps must be >= 1, got {probe_steps}")
    if not (math.isfinite(max_seconds) and max_seconds >= 0):
        raise ValueError(f"--max-seconds must be a finite number >= 0, got {max_seconds}")
    if top < 0:
        raise ValueError(f"--top must be >= 0, got {top}")
    if fp4_fraction is not None and max_loss_increase is not None:
        raise ValueError("give at most one of --fp4-fraction and --max-loss-increase")
    if fp4_fraction is not None and not 0 <= fp4_fraction <= 1:
        raise ValueError(f"--fp4-fraction must be a share of FLOPs in [0, 1], got {fp4_fraction}")
    if max_loss_increase is not None and not (math.isfinite(max_loss_increase) and max_loss_increase >= 0):
        raise ValueError(f"--max-loss-increase must be a finite number >= 0 (nats), got {max_loss_increase}")


def _check_paths(run_dir: str, policy_out: str | None) -> None:
    if not Path(run_dir).is_dir():
        raise ValueError(f"RUN_DIR {run_dir!r} is not a folder (a run written by `tenfold train`)")
    if policy_out is not None:
        if Path(policy_out).is_dir():
            raise ValueError(f"--policy-out {policy_out!r} is a folder; give a .toml file name")
        check_writable_dir(Path(policy_out).parent, "--policy-out's folder")


def sensitivity(
    run_dir: str = typer.Argument(..., help="a run folder written by `tenfold train` (holds weights.pt)"),
    candidates: str = typer.Option("nvfp4,mxfp8", help="comma-separated candidate recipes"),
    batches: int = typer.Option(16, help="held-out training-split batches to evaluate on"),
    top: int = typer.Option(20, help="rows to print (most sensitive first); 0: all"),
    fp4_fraction: float | None = typer.Option(
        None, help="write a policy with at least this share of GEMM FLOPs in NVFP4 (0..1)"
    ),
    max_loss_increase: float | None = typer.Option(
        None, help="write a policy whose summed loss increase stays within this (nats)"
    ),
    score: str = typer.Option(
        "loss",
        help="what the policy minimises: loss (increase, forward) | gradient (error, backward too) | "
        "training (loss after a few optimizer steps per block)",
    ),
    probe_steps: int = typer.Option(8, help="--score training: optimizer steps per block and format"),
    max_seconds: float = typer.Option(
        1800, help="--score training: refuse to start when the estimated cost is longer (0: no bound)"
    ),
    gpu: str | None = typer.Option(
        None, help="catalog GPU for the policy's cost model (default: bits proxy)"
    ),
    policy_out: str | None = typer.Option(None, help="policy TOML path (default: RUN_DIR/policy.toml)"),
    as_json: bool = typer.Option(False, "--json", help="print the table (and policy) as JSON"),
) -> None:
    """Quantize one layer at a time per candidate format and rank the layers by the loss increase.

    With --fp4-fraction or --max-loss-increase it also chooses a format per layer and writes the
    policy, which `tenfold train --policy` and `convert()` accept.

    --score training measures instead, per transformer block and format, the held-out loss after
    --probe-steps AdamW steps with that block's three GEMMs quantized, against the same steps in bf16
    (`tenfold.engine.autoprecision.training`); a block's loss increase is split over its layers by FLOPs
    for the policy.

    Example: tenfold train --steps 300 --out runs && tenfold sensitivity runs/bf16 --fp4-fraction 0.75
    """
    names = tuple(c.strip() for c in candidates.split(",") if c.strip())
    try:  # everything that needs no model, before torch loads and the minutes-long pass starts
        _check_numbers(batches, probe_steps, max_seconds, top, fp4_fraction, max_loss_increase)
        _check_paths(run_dir, policy_out)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    from tenfold.engine.autoprecision.policy import auto_policy, linear_flops
    from tenfold.engine.autoprecision.sensitivity import SCORES
    from tenfold.engine.autoprecision.sensitivity import sensitivity as measure
    from tenfold.engine.autoprecision.training import block_deltas
    from tenfold.train import ByteDataset, load_corpus, load_trained

    try:
        want_policy = fp4_fraction is not None or max_loss_increase is not None
        if score not in (*SCORES, "training"):
            raise ValueError(f"score must be one of {', '.join(SCORES)}, training; got {score!r}")
        if score == "gradient" and max_loss_increase is not None:
            raise ValueError("--max-loss-increase is in loss units: use --score loss, or --fp4-fraction")
        if want_policy and not {"nvfp4", "mxfp8"} <= set(names):
            raise ValueError("a policy needs both nvfp4 and mxfp8 among --candidates")
        if gpu is not None:
            from tenfold.perf import load_hardware

            load_hardware(gpu)
        cfg, model = load_trained(run_dir)
        data = ByteDataset.from_bytes(load_corpus(cfg.data, cfg.max_corpus_bytes))
        seq = cfg.gpt_config().seq_len
        n_train = probe_steps if score == "training" else 0
        items = data.calibration_batches(n_train + batches, cfg.batch_size, seq, cfg.seed)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    if score == "training":
        train_items, items = items[:n_train], items[n_train:]

    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]sensitivity[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=as_json,
    ) as progress:
        task = progress.add_task("layers", total=None)

        def step(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        try:
            if score == "training":
                sens = _measure_training(model, cfg, train_items, items, names, max_seconds, step)
            else:
                table = measure(model, items, candidates=names, progress=step, gradients=score == "gradient")
        except ValueError as err:
            raise typer.BadParameter(str(err)) from None

    pol = None
    path = None
    if want_policy:
        flops_all = linear_flops(model, tokens=cfg.tokens_per_step)
        deltas = block_deltas(sens, flops_all) if score == "training" else table.deltas(score)
        flops = {n: flops_all[n] for n in deltas}
        try:
            pol = auto_policy(
                deltas, flops, fp4_flop_fraction=fp4_fraction, max_loss_increase=max_loss_increase, gpu=gpu
            )
        except ValueError as err:
            raise typer.BadParameter(str(err)) from None
        path = pol.save(policy_out or Path(run_dir) / "policy.toml")

    if score == "training":
        _print_training(sens, run_dir, names, pol, path, as_json)
        return
    if as_json:
        out = {"run": str(run_dir), **table.to_dict()}
        if top:
            out["rows"] = out["rows"][:top]
        if pol is not None:
            out["policy"] = {"path": str(path), "layers": pol.layers, "meta": pol.meta}
        typer.echo(json.dumps(out))
        return
    print_sensitivity(table, run_dir, top, cfg.tokens_per_step, pol, path)


def _measure_training(model, cfg, train_items, eval_items, names, max_seconds, progress):
    """`train_sensitivity` from the run's weights, with the optimizer the run ended with (the trainer's
    AdamW at its final learning rate lr x min_lr_ratio, weight decay on matrices only; the moments start
    afresh)."""
    from tenfold.engine.autoprecision.training import train_sensitivity
    from tenfold.engine.convert import ConversionPolicy
    from tenfold.train.trainer import adamw

    def make_opt(params):
        return adamw(params, lr=cfg.lr * cfg.min_lr_ratio, weight_decay=cfg.weight_decay)

    return train_sensitivity(
        model,
        make_opt,
        train_items,
        eval_items,
        names,
        policy=ConversionPolicy(quant_backend="eager"),  # a few steps: compiling would cost more
        seed=cfg.seed,
        max_seconds=max_seconds or None,
        progress=progress,
    )


def _print_training(sens, run_dir: str, names, pol, path, as_json: bool) -> None:
    rows = [
        {
            "group": g,
            "format": c,
            "delta": sens.delta[g][c],
            "se": sens.delta_se[g][c],
            "update_cosine": sens.update_cosine[g][c],
            "layers": list(sens.layers[g]),
        }
        for g in sens.layers
        for c in names
    ]
    rows.sort(key=lambda r: -r["delta"])
    cost = {"optimizer_steps": sens.optimizer_steps, "seconds": sens.seconds, "probe_steps": sens.steps}
    if as_json:
        out = {"run": str(run_dir), "score": "training", "hp_loss": sens.hp_loss, **cost, "rows": rows}
        if pol is not None:
            out["policy"] = {"path": str(path), "layers": pol.layers, "meta": pol.meta}
        typer.echo(json.dumps(out))
        return
    t = Table(title=f"{run_dir}: blocks by loss increase after training steps", box=box.SIMPLE_HEAD)
    for col in ("block", "format", "delta", "SE", "update cos"):
        t.add_column(col, justify="left" if col in ("block", "format") else "right", no_wrap=True)
    for r in rows:
        cells = (f"{r['delta']:+.5f}", f"{r['se']:.5f}", f"{r['update_cosine']:.5f}")
        t.add_row(r["group"], r["format"], *cells)
    console = Console()
    console.print(t)
    console.print(
        f"bf16 loss after {sens.steps} steps: {sens.hp_loss:.5f}; a delta within 2 SE of zero is not a "
        f"measured harm; cost: {sens.optimizer_steps} optimizer steps in {sens.seconds:.0f} s"
    )
    if pol is not None:
        console.print(f"policy: {path}; train under it: tenfold train --policy {path}")


def print_sensitivity(
    table: SensitivityTable,
    run_dir: str,
    top: int,
    tokens_per_step: int,
    pol: PrecisionPolicy | None,
    path: Path | None,
) -> None:
    """The ranked layers as a table, the base loss, and the policy written (when one was)."""
    shown = table.cells(top or None)
    t = Table(
        title=f"{run_dir}: layers by loss increase ({len(shown)} of {len(table.rows)} rows)",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
    )
    # the loss itself is the base loss (printed below) plus delta; the gradient column only when measured:
    # what stays fits 80 columns without cutting or folding a number
    names = ("#", "layer", "format", "loss", "delta", "rel.", "output SQNR dB", "grad SQNR dB", "GEMM FLOPs")
    keep = [i for i, n in enumerate(names) if n not in ("#", "loss")]  # rows are in rank order
    if all(c[names.index("grad SQNR dB")] == "-" for c in shown):
        keep.remove(names.index("grad SQNR dB"))
    for i in keep:
        justify = "left" if names[i] in ("layer", "format") else "right"
        t.add_column(names[i].replace("output", "out").replace(" ", "\n"), justify=justify, no_wrap=True)
    for cells in shown:
        t.add_row(*(cells[i] for i in keep))
    out_console = Console()
    out_console.print(t)
    out_console.print(
        f"base loss {table.base_loss:.5f} over {table.n_batches} batches of {tokens_per_step} tokens"
    )
    if pol is not None:
        m = pol.meta
        out_console.print(
            f"policy: {path} (FP4 share {m['fp4_flop_fraction_reached']:.1%}, expected GEMM speedup "
            f"vs bf16 {m['expected_gemm_speedup_vs_bf16']:.2f}x, estimated loss increase "
            f"{m['estimated_loss_increase']:+.5f}); train under it: tenfold train --policy {path}"
        )
