"""`tenfold estimate train` (one training plan), `tenfold estimate infer` (one serving configuration) and
`tenfold estimate disagg` (a disaggregated prefill/decode deployment sized for a load; cli/disagg.py)."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tenfold.cli.calibrate import (
    CALIBRATION_HELP,
    INFERENCE_CALIBRATION_HELP,
    calibration_label,
    user_calibration,
)
from tenfold.cli.disagg import disagg
from tenfold.cli.output import EXIT_INFEASIBLE, check_range, fail, print_json
from tenfold.perf import Deployment, estimate_inference, inference_curve
from tenfold.perf.defaults import MAX_BATCH, MAX_GPUS, MAX_SEQ, MAX_VP, TRAINING
from tenfold.perf.errors import Infeasible
from tenfold.perf.serving.results import InferenceCurve, InferenceEstimate
from tenfold.perf.training.estimate import TrainingEstimate, estimate_training
from tenfold.perf.training.layout import Layout
from tenfold.report.format import fmt_number, fmt_range
from tenfold.report.ranges import RANGE_NOTE, SERVING_RANGE_NOTE, has_interval, training_intervals

app = typer.Typer(help="Estimate one training plan or one serving configuration.", no_args_is_help=True)
app.command("disagg")(disagg)


@app.callback()
def _group() -> None:
    """Estimate one plan."""


@app.command("train")
def train(
    model: str = typer.Option(..., "--model", "-m", help="catalog model (llama3-70b) or a TOML file"),
    gpu: str = typer.Option(
        ..., "--gpu", "-g", help="catalog accelerator (h100-sxm, gb200, ...) or a TOML file"
    ),
    seq_len: int = typer.Option(TRAINING.seq_len, "--seq-len", help="tokens per sequence"),
    global_batch: int = typer.Option(
        TRAINING.global_batch, "--global-batch", help="sequences per optimizer step"
    ),
    tp: int = typer.Option(1, help="tensor parallel"),
    pp: int = typer.Option(1, help="pipeline parallel"),
    dp: int = typer.Option(0, help="data parallel (0: num-gpus / (tp·pp·cp))"),
    cp: int = typer.Option(1, help="context parallel"),
    ep: int = typer.Option(1, help="expert parallel (MoE)"),
    vp: int = typer.Option(1, help="virtual pipeline stages (interleaved 1F1B)"),
    micro_batch: int = typer.Option(1, "--micro-batch", help="sequences per micro-batch"),
    recompute: str = typer.Option("none", help="none | selective | full"),
    zero: int = typer.Option(-1, help="ZeRO stage 0-3 (3 = FSDP); -1: the software's default"),
    num_gpus: int = typer.Option(0, "--num-gpus", help="cluster size (checked against the layout)"),
    precision: str = typer.Option(TRAINING.precision, help="bf16 | fp16 | fp8 | mxfp8 | nvfp4"),
    software: str = typer.Option(TRAINING.software, help="software stack preset"),
    calibration: str = typer.Option("", "--calibration", help=CALIBRATION_HELP),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of tables"),
) -> None:
    """Estimate one training plan: step time with breakdown, tokens/s/GPU, MFU, memory per GPU.

    Example: tenfold estimate train -m llama3-70b -g h100-sxm --seq-len 8192 --global-batch 256
    --tp 4 --pp 8 --vp 5 --dp 2 --precision fp8

    Exit codes: 0 feasible, 1 infeasible (the reason is printed), 2 bad input.
    """
    for flag, v in (("--tp", tp), ("--pp", pp), ("--cp", cp), ("--ep", ep), ("--micro-batch", micro_batch)):
        check_range(flag, v, 1, MAX_GPUS)
    check_range("--vp", vp, 1, MAX_VP)
    check_range("--dp", dp, 0, MAX_GPUS)
    check_range("--num-gpus", num_gpus, 0, MAX_GPUS)
    check_range("--zero", zero, -1, 3)
    check_range("--seq-len", seq_len, 1, MAX_SEQ)
    check_range("--global-batch", global_batch, 1, MAX_BATCH)
    cal = user_calibration(calibration)
    try:
        if dp == 0:
            if not num_gpus or num_gpus % (tp * pp * cp):
                raise ValueError(f"give --dp, or --num-gpus divisible by tp·pp·cp = {tp * pp * cp}")
            dp = num_gpus // (tp * pp * cp)
        layout = Layout(
            tp=tp,
            pp=pp,
            dp=dp,
            cp=cp,
            ep=ep,
            vp=vp,
            micro_batch=micro_batch,
            recompute=recompute,
            zero=None if zero < 0 else zero,
        )
        est = estimate_training(
            model,
            gpu,
            layout,
            seq_len=seq_len,
            global_batch=global_batch,
            precision=precision,
            num_gpus=num_gpus or None,
            software=software,
            calibration=cal,
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    if as_json:
        extra = {"calibration": calibration_label(calibration, cal)} if cal else {}
        print_json(est.to_dict() | training_intervals(est) | extra)
    else:
        console = Console()
        for table in estimate_tables(est):
            console.print(table)
        for note in est.notes:
            console.print(f"[yellow]note:[/yellow] {note}")
        if has_interval(est):
            console.print(escape(RANGE_NOTE), style="dim")
        if est.gemm_source:
            console.print(f"GEMM efficiency: {escape(est.gemm_source)}", style="dim")
        if cal:
            console.print(f"calibration: {escape(calibration_label(calibration, cal))}")
    if not est.feasible:
        raise typer.Exit(EXIT_INFEASIBLE)


@app.command("infer")
def infer(
    model: str = typer.Option(..., "--model", "-m", help="catalog model (llama3-70b) or a TOML file"),
    gpu: str = typer.Option(
        ..., "--gpu", "-g", help="catalog accelerator (h200, b200, gb200, ...) or a TOML file"
    ),
    input_len: int = typer.Option(..., "--input-len", help="prompt tokens per request (ISL)"),
    output_len: int = typer.Option(..., "--output-len", help="generated tokens per request (OSL)"),
    concurrency: int = typer.Option(0, help="requests in flight (0: as many as fit, the max-load point)"),
    tp: int = typer.Option(1, help="attention tensor parallel"),
    dp: int = typer.Option(1, help="attention data parallel (replicas sharing the EP group; needs tp 1)"),
    ep: int = typer.Option(1, help="expert parallel over tp·dp GPUs (the rest is expert TP)"),
    pp: int = typer.Option(1, help="pipeline stages of tp·dp GPUs each (GPUs = tp·dp·pp)"),
    precision: str = typer.Option("bf16", help="weights: bf16 | fp16 | fp8 | mxfp8 | nvfp4 | mxfp4"),
    activations: str = typer.Option("", help="GEMM input format (default: as the weights; mxfp4 -> mxfp8)"),
    attention_precision: str = typer.Option("", "--attention-precision", help="attention projections"),
    kv_precision: str = typer.Option(
        "auto",
        "--kv-precision",
        help="KV cache: auto (the checkpoint's KV scheme, else bf16) | bf16 | fp16 | fp8 | nvfp4",
    ),
    engine: str = typer.Option("trtllm", help="serving engine preset: trtllm | trtllm-bench | vllm | sglang"),
    draft_tokens: int = typer.Option(0, "--draft-tokens", help="MTP speculative tokens per step"),
    accepted_tokens: float = typer.Option(1.0, "--accepted-tokens", help="mean tokens accepted per step"),
    usd_per_gpu_hour: float = typer.Option(-1.0, "--usd-per-gpu-hour", help="price (default: catalog)"),
    curve: bool = typer.Option(False, "--curve", help="also the throughput-vs-interactivity curve"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of tables"),
    calibration: str = typer.Option("", "--calibration", help=INFERENCE_CALIBRATION_HELP),
) -> None:
    """Estimate one serving configuration: TTFT, TPOT, output tokens/s per GPU and per user, cost per
    million tokens (output and input+output), each with its 80 % range from the model's cross-validated
    error, the step breakdown and memory per GPU.

    Example: tenfold estimate infer -m llama3-70b -g b200 --input-len 1024 --output-len 1024
    --precision nvfp4 --kv-precision fp8 --concurrency 64 --curve

    Exit codes: 0 feasible, 1 infeasible (the reason is printed with its numbers), 2 bad input.
    """
    check_range("--input-len", input_len, 1, MAX_SEQ)
    check_range("--output-len", output_len, 1, MAX_SEQ)
    check_range("--concurrency", concurrency, 0)
    for flag, v in (("--tp", tp), ("--dp", dp), ("--ep", ep), ("--pp", pp)):
        check_range(flag, v, 1, MAX_GPUS)
    check_range("--draft-tokens", draft_tokens, 0)
    check_range("--accepted-tokens", accepted_tokens, 0)
    if usd_per_gpu_hour != -1.0:
        check_range("--usd-per-gpu-hour", usd_per_gpu_hour, 0)
    kw = dict(
        input_len=input_len,
        output_len=output_len,
        precision=precision,
        activations=activations or None,
        attention_precision=attention_precision or None,
        kv_precision=kv_precision,
        engine=engine,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted_tokens,
        usd_per_gpu_hour=None if usd_per_gpu_hour < 0 else usd_per_gpu_hour,
        calibration=user_calibration(calibration, kind="inference"),
    )
    try:
        dep = Deployment(tp=tp, dp=dp, ep=ep, pp=pp)
        est = estimate_inference(model, gpu, dep, concurrency=concurrency or None, **kw)
        points = inference_curve(model, gpu, dep, **kw) if curve and est.feasible else None
    except ValueError as exc:
        raise fail(str(exc)) from None
    except Infeasible as exc:  # the curve found no concurrency at which the configuration runs
        raise fail(f"infeasible: {exc}", EXIT_INFEASIBLE) from None
    cal = kw["calibration"]
    if as_json:
        d = est.to_dict()
        if points is not None:
            d["curve"] = points.to_dict()
        if cal:
            d["calibration"] = calibration_label(calibration, cal)
        print_json(d)
    else:
        console = Console()
        for table in inference_tables(est):
            console.print(table)
        if points is not None:
            console.print(curve_table(points))
        for note in est.notes:
            console.print(f"[yellow]note:[/yellow] {note}")
        if est.interval_fields()["interval_level"] is not None:
            console.print(escape(SERVING_RANGE_NOTE), style="dim")
        if cal:
            console.print(f"calibration: {escape(calibration_label(calibration, cal))}")
    if not est.feasible:
        raise typer.Exit(EXIT_INFEASIBLE)


def estimate_tables(e: TrainingEstimate) -> list[Table]:
    """Summary, step-time breakdown and memory tables for one estimate."""
    head = Table(
        title=f"{e.model} on {e.num_gpus} x {e.hardware}: {e.layout.describe()} ({e.software}); "
        f"global batch {e.global_batch:,} x {e.seq_len:,} tokens, {e.precision}"
        + ("" if e.calibrated else " (uncalibrated)")
    )
    mfu = [("MFU (bf16 peak)", e.mfu_bf16)]
    if e.precision != "bf16":  # the same column twice otherwise
        mfu.append((f"MFU ({e.precision} peak)", e.mfu_precision))
    rng = training_intervals(e)
    ranged = rng["step_time_s_interval"] is not None
    cells = [
        fmt_range(e.step_time_s, rng["step_time_s_interval"], ".3f", sep="\n"),
        fmt_range(e.tokens_per_s_per_gpu, rng["tokens_per_s_per_gpu_interval"], ",.0f", sep="\n"),
        fmt_number(e.model_tflops_per_gpu, ",.0f"),
        *(fmt_number(v, ".1%") for _, v in mfu),
    ]
    cols = ("step s", "tokens/s/GPU", "model TFLOP/s/GPU", *(name for name, _ in mfu))
    for i, col in enumerate(cols):
        label = col.replace(" ", "\n") + ("\n80 % range" if ranged and i < 2 else "")
        # never narrower than its longest line, so a range wraps whole rather than being cut
        width = max(len(line) for line in cells[i].splitlines())
        head.add_column(label, justify="right", overflow="fold", min_width=width)
    head.add_column("feasible", justify="right", overflow="fold")
    head.add_row(*cells, "yes" if e.feasible else f"[red]no[/red]: {e.reason}")
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
    rng = e.interval_fields()
    head.add_column("metric")
    head.add_column(
        "value (80 % range)" if rng["interval_level"] is not None else "value",
        justify="right",
        overflow="fold",
    )
    for label, value in (  # one row per metric: fits 80 columns, numbers never cut
        ("concurrency (requests in flight)", str(e.concurrency)),
        (
            "batch per rank",
            f"{e.batch_per_rank} of {e.capacity // max(e.deployment.dp, 1)}" if e.feasible else "-",
        ),
        ("TTFT ms", fmt_range(e.ttft_s * 1e3, rng["ttft_ms_interval"], ",.1f")),
        ("TPOT ms", fmt_range(e.tpot_s * 1e3, rng["tpot_ms_interval"], ".2f")),
        (
            "output tok/s per GPU",
            fmt_range(e.output_tokens_per_s_per_gpu, rng["output_tokens_per_s_per_gpu_interval"], ",.0f"),
        ),
        (
            "input+output tok/s per GPU",
            fmt_range(e.total_tokens_per_s_per_gpu, rng["total_tokens_per_s_per_gpu_interval"], ",.0f"),
        ),
        (
            "output tok/s per user",
            fmt_range(e.output_tokens_per_s_per_user, rng["output_tokens_per_s_per_user_interval"], ",.1f"),
        ),
        (
            "$ per M output tokens",
            fmt_range(e.usd_per_m_output_tokens, rng["usd_per_m_output_tokens_interval"], ".3f"),
        ),
        (
            "$ per M input+output tokens",
            fmt_range(e.usd_per_m_total_tokens, rng["usd_per_m_total_tokens_interval"], ".3f"),
        ),
        ("feasible", f"yes (batch limit: {e.limited_by})" if e.feasible else f"[red]no[/red]: {e.reason}"),
    ):
        head.add_row(label, value)
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
            "pp": "PP stage sends",
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
            fmt_number(p.ttft_s * 1e3, ",.1f"),
            fmt_number(p.tpot_s * 1e3, ".2f"),
            fmt_number(p.usd_per_m_output_tokens, ".3f"),
            "queued" if p.saturated else "",
        )
    return t
