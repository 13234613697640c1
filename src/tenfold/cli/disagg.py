"""`tenfold estimate disagg`: a disaggregated prefill/decode deployment sized for a load (serving/disagg.py);
registered on `tenfold estimate` by cli/estimate.py."""

from __future__ import annotations

from dataclasses import replace

import typer
from rich.console import Console
from rich.table import Table

from tenfold.cli.calibrate import CALIBRATION_HELP, user_calibration
from tenfold.cli.output import EXIT_INFEASIBLE, check_range, fail, print_json
from tenfold.perf import Deployment
from tenfold.perf.defaults import MAX_GPUS, MAX_SEQ
from tenfold.perf.errors import Infeasible
from tenfold.perf.serving.disagg import KV_LINKS, plan_disagg
from tenfold.perf.serving.disagg_results import DisaggEstimate
from tenfold.perf.serving.query import ServingQuery
from tenfold.report.format import fmt_number


def disagg(
    model: str = typer.Option(..., "--model", "-m", help="catalog model (deepseek-v3) or a TOML file"),
    gpu: str = typer.Option(..., "--gpu", "-g", help="catalog accelerator (h100-sxm, gb200, ...)"),
    input_len: int = typer.Option(..., "--input-len", help="prompt tokens per request (ISL)"),
    output_len: int = typer.Option(..., "--output-len", help="generated tokens per request (OSL), >= 2"),
    prefill: str = typer.Option("1,1,1", help="prefill instance as tp,dp,ep (e.g. 1,8,8 = DEP8)"),
    decode: str = typer.Option("1,1,1", help="decode instance as tp,dp,ep"),
    redundant_experts: int = typer.Option(
        0, "--redundant-experts", help="EPLB's extra expert slots in each instance (EP72 on 256 + 32)"
    ),
    rps: float = typer.Option(0.0, "--rps", help="load in requests/s (0: use --concurrency)"),
    concurrency: int = typer.Option(
        0, help="load as requests in flight (0 and no --rps: one decode instance)"
    ),
    ttft_ms: float = typer.Option(0.0, "--ttft-ms", help="TTFT target (0: none)"),
    tpot_ms: float = typer.Option(0.0, "--tpot-ms", help="TPOT target (0: none)"),
    kv_link: str = typer.Option("auto", "--kv-link", help="KV transfer link: auto | scale-up | network"),
    layerwise: bool = typer.Option(False, "--layerwise", help="KV sent layer by layer during prefill"),
    precision: str = typer.Option("bf16", help="weights: bf16 | fp16 | fp8 | mxfp8 | nvfp4 | mxfp4"),
    attention_precision: str = typer.Option("", "--attention-precision", help="attention projections"),
    kv_precision: str = typer.Option(
        "auto", "--kv-precision", help="KV cache: auto (what the engine picks) | bf16 | fp16 | fp8 | nvfp4"
    ),
    engine: str = typer.Option("trtllm", help="engine preset for both pools (trtllm, vllm, sglang, ...)"),
    draft_tokens: int = typer.Option(0, "--draft-tokens", help="MTP speculative tokens per decode step"),
    accepted_tokens: float = typer.Option(1.0, "--accepted-tokens", help="mean tokens accepted per step"),
    calibration: str = typer.Option("", "--calibration", help=CALIBRATION_HELP),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of tables"),
) -> None:
    """Size a disaggregated prefill/decode deployment: prefill and decode instances for a load, their
    ratio, TTFT (prefill + KV transfer + first decode step), TPOT, tokens/s per GPU over both pools.

    Example: tenfold estimate disagg -m deepseek-v3 -g gb200 --input-len 2000 --output-len 1000
    --precision nvfp4 --kv-precision fp8 --prefill 1,4,4 --decode 1,48,48 --redundant-experts 32
    --rps 200 --tpot-ms 50

    Exit codes: 0 feasible, 1 infeasible (the reason is printed with its numbers), 2 bad input.
    """
    check_range("--input-len", input_len, 1, MAX_SEQ)
    check_range("--output-len", output_len, 2, MAX_SEQ)
    check_range("--rps", rps, 0)
    check_range("--concurrency", concurrency, 0)
    check_range("--ttft-ms", ttft_ms, 0)
    check_range("--tpot-ms", tpot_ms, 0)
    check_range("--draft-tokens", draft_tokens, 0)
    check_range("--redundant-experts", redundant_experts, 0, 4096)
    if kv_link not in KV_LINKS:
        raise fail(f"--kv-link {kv_link!r} is not one of {', '.join(KV_LINKS)}")
    pools = {
        flag: replace(parse_instance(flag, text), redundant_experts=redundant_experts)
        for flag, text in (("--prefill", prefill), ("--decode", decode))
    }
    cal = user_calibration(calibration)
    try:
        query = ServingQuery(
            model=model,
            hardware=gpu,
            input_len=input_len,
            output_len=output_len,
            precision=precision,
            attention_precision=attention_precision or None,
            kv_precision=kv_precision,
            engine=engine,
            draft_tokens=draft_tokens,
            accepted_tokens=accepted_tokens,
        )
        est = plan_disagg(
            query,
            prefill=pools["--prefill"],
            decode=pools["--decode"],
            requests_per_s=rps or None,
            concurrency=concurrency or None,
            ttft_target_s=ttft_ms / 1e3 or None,
            tpot_target_s=tpot_ms / 1e3 or None,
            kv_link=kv_link,
            layerwise=layerwise,
            calibration=cal,
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    except Infeasible as exc:
        raise fail(f"infeasible: {exc}", EXIT_INFEASIBLE) from None
    if as_json:
        print_json(est.to_dict())
        return
    console = Console()
    console.print(disagg_table(est))
    for note in est.notes:
        console.print(f"[yellow]note:[/yellow] {note}")


def parse_instance(flag: str, text: str) -> Deployment:
    """'tp,dp,ep' -> Deployment; exit 2 naming the flag when malformed."""
    try:
        tp, dp, ep = (int(v) for v in text.split(","))
        for v in (tp, dp, ep):
            check_range(flag, v, 1, MAX_GPUS)
        return Deployment(tp=tp, dp=dp, ep=ep)
    except ValueError:
        raise fail(f"{flag} {text!r}: expected tp,dp,ep as three positive integers (e.g. 1,8,8)") from None


def disagg_table(e: DisaggEstimate) -> Table:
    """One P/D deployment: the pools, latencies, rates and the KV transfer."""
    p, d, kv = e.prefill, e.decode, e.kv_transfer
    t = Table(title=f"{e.model} on {e.hardware}, P/D, ISL {e.input_len} / OSL {e.output_len}")
    t.add_column("metric")
    t.add_column("value", justify="right", overflow="fold")
    for label, value in (
        ("load (requests/s)", fmt_number(e.requests_per_s, ",.2f")),
        ("prefill", f"{e.prefill_instances} x {p.deployment.describe()} = {e.prefill_gpus} GPUs"),
        ("decode", f"{e.decode_instances} x {d.deployment.describe()} = {e.decode_gpus} GPUs"),
        ("prefill : decode GPUs (balanced)", f"{e.prefill_to_decode_gpus:.2f} ({e.balanced_ratio:.2f})"),
        ("prefill batch per rank", f"{p.batch_per_rank} prompts in flight"),
        ("decode batch per rank", f"{d.batch_per_rank} sequences of {d.capacity // d.deployment.dp}"),
        ("TTFT ms", fmt_number(e.ttft_s * 1e3, ",.1f")),
        ("KV transfer ms (exposed)", f"{kv.seconds * 1e3:.2f} ({kv.exposed_s * 1e3:.2f}) over {kv.link}"),
        ("KV link utilization", fmt_number(kv.link_utilization, ".1%")),
        ("TPOT ms", fmt_number(e.tpot_s * 1e3, ".2f")),
        ("output tok/s per GPU (both pools)", fmt_number(e.output_tokens_per_s_per_gpu, ",.0f")),
        ("input+output tok/s per GPU", fmt_number(e.total_tokens_per_s_per_gpu, ",.0f")),
        ("prefill input tok/s per GPU", fmt_number(p.input_tokens_per_s_per_gpu, ",.0f")),
        ("decode output tok/s per GPU", fmt_number(d.output_tokens_per_s_per_gpu, ",.0f")),
        ("targets met", "yes" if e.meets_targets else "[red]no[/red] (see notes)"),
    ):
        t.add_row(label, value)
    return t
