"""Shared pieces of the planning commands (`estimate`, `search`, `validate`): rendering and exit codes.

Exit codes: 0 ok, 1 infeasible (no plan fits / the plan cannot run), 2 bad input.
"""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from tenfold.perf.serving.estimate import InferenceCurve, InferenceEstimate
from tenfold.perf.training.estimate import TrainingEstimate
from tenfold.report.format import fmt_number, json_clean

EXIT_OK, EXIT_INFEASIBLE, EXIT_BAD_INPUT = 0, 1, 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    Console(stderr=True).print(f"[red]error:[/red] {message}")
    return typer.Exit(code)


def print_json(obj: dict) -> None:
    typer.echo(json.dumps(json_clean(obj), indent=2))


def estimate_tables(e: TrainingEstimate) -> list[Table]:
    """Summary, step-time breakdown and memory tables for one estimate."""
    head = Table(
        title=f"{e.model} on {e.num_gpus} x {e.hardware}: {e.layout.describe()} ({e.precision}, {e.software})"
    )
    for col in (
        "step s",
        "tokens/s/GPU",
        "model TFLOP/s/GPU",
        "MFU (bf16 peak)",
        f"MFU ({e.precision} peak)",
        "feasible",
    ):
        head.add_column(col, justify="right")
    head.add_row(
        fmt_number(e.step_time_s, ".3f"),
        fmt_number(e.tokens_per_s_per_gpu, ",.0f"),
        fmt_number(e.model_tflops_per_gpu, ",.0f"),
        fmt_number(e.mfu_bf16, ".1%"),
        fmt_number(e.mfu_precision, ".1%"),
        "yes" if e.feasible else f"[red]no[/red]: {e.reason}",
    )
    tables = [head]
    if e.breakdown is not None:
        bd = Table(title="step time (exposed seconds per step)")
        bd.add_column("part")
        bd.add_column("seconds", justify="right")
        bd.add_column("share", justify="right")
        names = ("compute", "tp", "cp", "ep", "pp", "fsdp", "bubble", "dp", "optimizer")
        labels = (
            "compute (incl. recompute)",
            "tensor-parallel comm",
            "context-parallel comm",
            "expert all-to-all",
            "pipeline p2p",
            "FSDP gathers",
            "pipeline bubble",
            "data-parallel comm",
            "optimizer step",
        )
        for n, label in zip(names, labels, strict=True):
            v = getattr(e.breakdown, f"{n}_s")
            bd.add_row(label, fmt_number(v, ".3f"), fmt_number(v / e.step_time_s, ".1%"))
        bd.add_row(
            "  of which recompute",
            fmt_number(e.breakdown.recompute_s, ".3f"),
            fmt_number(e.breakdown.recompute_s / e.step_time_s, ".1%"),
        )
        tables.append(bd)
    if e.memory is not None:
        mt = Table(title="memory per GPU (busiest stage)")
        mt.add_column("part")
        mt.add_column("GiB", justify="right")
        for n in ("weights", "grads", "optimizer", "activations", "other", "total", "capacity"):
            mt.add_row(n, fmt_number(getattr(e.memory, f"{n}_GiB"), ".1f"))
        tables.append(mt)
    return tables


def inference_tables(e: InferenceEstimate) -> list[Table]:
    """Summary, step-time breakdown and memory tables for one serving estimate."""
    head = Table(
        title=f"{e.model} on {e.num_gpus} x {e.hardware}: {e.deployment.describe()}, weights {e.precision} "
        f"(GEMM inputs {e.activations}, attention {e.attention_precision}), KV {e.kv_precision}, "
        f"{e.engine}, ISL {e.input_len} / OSL {e.output_len}"
    )
    cols = (
        "concurrency",
        "batch/rank",
        "TTFT ms",
        "TPOT ms",
        "out tok/s/GPU",
        "in+out tok/s/GPU",
        "out tok/s/user",
        "$/M out tok",
        "$/M in+out tok",
        "feasible",
    )
    for col in cols:
        head.add_column(col, justify="right")
    head.add_row(
        str(e.concurrency),
        f"{e.batch_per_rank} of {e.capacity // max(e.deployment.dp, 1)}" if e.feasible else "-",
        fmt_number(e.ttft_ms, ",.1f"),
        fmt_number(e.tpot_ms, ".2f"),
        fmt_number(e.output_tokens_per_s_per_gpu, ",.0f"),
        fmt_number(e.total_tokens_per_s_per_gpu, ",.0f"),
        fmt_number(e.output_tokens_per_s_per_user, ",.1f"),
        fmt_number(e.usd_per_m_output_tokens, ".3f"),
        fmt_number(e.usd_per_m_total_tokens, ".3f"),
        f"yes (batch limit: {e.limited_by})" if e.feasible else f"[red]no[/red]: {e.reason}",
    )
    tables = [head]
    if e.breakdown is not None:
        bd = Table(title="one engine step on one GPU (decode + prefill tokens)")
        bd.add_column("part")
        bd.add_column("ms", justify="right")
        bd.add_column("share", justify="right")
        labels = {
            "attn_proj": "attention projections",
            "attention": "attention (KV read / prefill)",
            "ffn": "FFN / experts",
            "tp": "TP all-reduce",
            "ep": "EP exchange",
            "head": "output head",
            "draft": "MTP draft passes",
            "overhead": "kernel + step overhead",
        }
        for k, label in labels.items():
            v = getattr(e.breakdown, f"{k}_s")
            bd.add_row(label, fmt_number(v * 1e3, ".2f"), fmt_number(v / e.breakdown.step_s, ".1%"))
        bd.add_row("step", fmt_number(e.breakdown.step_s * 1e3, ".2f"), "100.0%")
        tables.append(bd)
    mt = Table(title="memory per GPU")
    mt.add_column("part")
    mt.add_column("GiB", justify="right")
    for label, v in (
        ("weights", e.weights_GiB),
        ("workspace (runtime + activations + logits)", e.workspace_GiB),
        ("KV-cache budget", e.kv_budget_GiB),
        ("KV per sequence (reserved)", e.kv_per_sequence_GiB),
        ("capacity", e.capacity_GiB),
    ):
        mt.add_row(label, fmt_number(v, ".2f"))
    tables.append(mt)
    return tables


def curve_table(c: InferenceCurve) -> Table:
    """The throughput-versus-interactivity curve as rows (concurrency ascending)."""
    t = Table(
        title=f"throughput vs interactivity: {c.model} on {c.hardware} {c.deployment.describe()} "
        f"({c.precision}, KV {c.kv_precision}); capacity {c.capacity} sequences"
    )
    for col in ("concurrency", "out tok/s/user", "out tok/s/GPU", "TTFT ms", "TPOT ms", "$/M out tok", ""):
        t.add_column(col, justify="right")
    for p in c.points:
        t.add_row(
            str(p.concurrency),
            fmt_number(p.output_tokens_per_s_per_user, ",.1f"),
            fmt_number(p.output_tokens_per_s_per_gpu, ",.0f"),
            fmt_number(p.ttft_ms, ",.1f"),
            fmt_number(p.tpot_ms, ".2f"),
            fmt_number(p.usd_per_m_output_tokens, ".3f"),
            "queued" if p.saturated else "",
        )
    return t
