"""Pipeline parallelism and replicas in the serving model (issue 16): one test per mechanism, each failing
when the mechanism is removed (weights and KV per stage, a decode token crossing every stage, the send
between stages, chunked pipelined prefill checked against SGLang's published PP8 speed-up, replicas)."""

import json

import pytest
from typer.testing import CliRunner

from tenfold.cli.main import app
from tenfold.perf.calibration import load_calibration
from tenfold.perf.serving import steady_state
from tenfold.perf.serving.estimate import estimate_inference
from tenfold.perf.serving.pipeline import stage_model, stage_send_time
from tenfold.perf.serving.presets import engine
from tenfold.perf.serving.results import Deployment
from tenfold.perf.serving.search import deployments, search_inference
from tenfold.perf.specs.hardware import load_hardware
from tenfold.perf.specs.models import load_model
from tenfold.perf.validation.rows import read_rows
from tenfold.perf.validation.serving import case_from_row, default_runs_path, predict_case

# LMSYS, "Pipeline Parallelism in SGLang" (2026-01-15): Qwen3-235B-A22B-FP8 on H20, 128K-token prompt,
# TTFT "~55.5s (PP1 TP4)" and 10.54 s with PP8 TP4 (Table 1); rows lmsys-pp-qwen3-* of the shipped CSV.
SGLANG_PP1_TTFT_S, SGLANG_PP8_TTFT_S = 55.5, 10.54
QWEN_128K = dict(
    input_len=131072,
    output_len=1,
    concurrency=1,
    precision="fp8",
    kv_precision="bf16",
    engine=engine("sglang", kv_fraction=0.8, max_batch_size=128, max_num_tokens=6144),
)


def test_a_stage_is_the_heaviest_slice_of_layers():
    ds = load_model("deepseek-v3")
    s = stage_model(ds, 4)
    assert (s.layers, s.dense_layers) == (16, 0)  # 61 layers: 16 MoE layers on the last stage
    assert stage_model(ds, 1) is ds
    assert stage_model(load_model("qwen3-235b-a22b"), 8).layers == 12  # ceil(94 / 8)


def test_weights_and_kv_cache_split_over_stages():
    kw = dict(input_len=1024, output_len=1024, precision="fp8", kv_precision="fp8")
    one = estimate_inference("llama3-70b", "h200", Deployment(tp=1), **kw)
    four = estimate_inference("llama3-70b", "h200", Deployment(tp=1, pp=4), **kw)
    assert four.kv_per_sequence_GiB == pytest.approx(one.kv_per_sequence_GiB / 4)
    assert four.weights_GiB < 0.3 * one.weights_GiB  # 20 of 80 layers + one vocabulary matrix
    assert four.capacity > 3 * one.capacity  # the freed memory holds more sequences


def test_a_decode_token_crosses_every_stage():
    """At one sequence decode reads every weight once per token whatever the split: PP leaves TPOT about
    where one GPU has it (each stage reads 1/pp of the weights, the token visits pp stages), while TP
    splits the reads and cuts it."""
    kw = dict(input_len=1024, output_len=1024, concurrency=1, precision="fp8", kv_precision="fp8")
    one = estimate_inference("llama3-8b", "h100-sxm", Deployment(), **kw)
    pp2 = estimate_inference("llama3-8b", "h100-sxm", Deployment(pp=2), **kw)
    tp2 = estimate_inference("llama3-8b", "h100-sxm", Deployment(tp=2), **kw)
    assert pp2.tpot_s == pytest.approx(one.tpot_s, rel=0.10)
    assert tp2.tpot_s < 0.75 * pp2.tpot_s
    b = pp2.breakdown
    parts = sum(getattr(b, f) for f in vars(b) if f.endswith("_s") and f != "step_s")
    assert parts == pytest.approx(b.step_s) and b.step_s == pytest.approx(pp2.tpot_s)


def test_stage_send_leaves_the_domain_when_a_stage_fills_it():
    links = load_calibration(kind="inference").links(load_hardware("h100-sxm"))
    inside = stage_send_time(4096, hidden=8192, stage_gpus=4, pp=2, links=links)
    across = stage_send_time(4096, hidden=8192, stage_gpus=8, pp=2, links=links)
    size = 4096 * 8192 * 2 * 2.0  # hidden states + residual in BF16
    assert inside == pytest.approx(size / links.up_Bps + links.up_latency_s)
    assert across == pytest.approx(size / links.out_Bps + links.out_latency_s)
    assert stage_send_time(4096, hidden=8192, stage_gpus=8, pp=1, links=links) == 0.0
    est = estimate_inference(
        "llama3-70b", "h100-sxm", Deployment(tp=8, pp=2), input_len=1024, output_len=1024, precision="fp8"
    )
    assert est.breakdown.pp_s > 0.0


def _qwen_ttft(pp: int) -> float:
    return estimate_inference("qwen3-235b-a22b", "h20", Deployment(tp=4, pp=pp), **QWEN_128K).ttft_s


def test_chunked_pipelined_prefill_matches_sglang_pp8_speedup(monkeypatch):
    """TTFT of one 128K prompt, PP1 -> PP8: measured 55.5 / 10.54 = 5.27x. The model's sum of chunk
    times + (pp - 1) slowest chunks lands within 12 %; without the fill bubble it would be near 8x, and
    without pipelining a prompt's chunks (each chunk crossing all stages before the next) near 1x."""
    measured = SGLANG_PP1_TTFT_S / SGLANG_PP8_TTFT_S
    model = _qwen_ttft(1) / _qwen_ttft(8)
    assert model == pytest.approx(measured, rel=0.12)
    monkeypatch.setattr(steady_state, "pipelined_time", lambda per, slowest, items, pp: items * per)
    no_bubble = _qwen_ttft(1) / _qwen_ttft(8)
    monkeypatch.setattr(steady_state, "pipelined_time", lambda per, slowest, items, pp: items * per * pp)
    serial = _qwen_ttft(1) / _qwen_ttft(8)
    for off in (no_bubble, serial):
        assert off != pytest.approx(measured, rel=0.12)


def _shipped_row(row_id: str) -> dict:
    return next(r for r in read_rows(default_runs_path(), ("id",)) if r["id"] == row_id)


def test_spare_gpus_without_attention_dp_are_replicas():
    """TP1 on 4 GPUs without attention DP: four instances that never meet, each at a quarter of the load."""
    row = {
        **_shipped_row("trtllm10-llama31-8b-h100-tp1-fp8-1k1k"),
        "num_gpus": "4",
        "attention_dp": "0",
        "concurrency": "64",
        "pp": "",
    }
    case = case_from_row(row)
    assert not case.reason, case.reason
    assert case.query.deployment == Deployment(tp=1)
    assert case.concurrency == 16
    assert any("4 independent replicas" in a for a in case.assumed)
    cal = load_calibration(kind="inference")
    one_gpu = predict_case(case_from_row({**row, "num_gpus": "1", "concurrency": "16"}), cal)
    assert predict_case(case, cal).predicted == pytest.approx(one_gpu.predicted)


def test_pipeline_rows_resolve_with_their_stages():
    case = case_from_row(_shipped_row("lmsys-pp-qwen3-235b-fp8-h20-tp4-pp8-128k"))
    assert case.query.deployment == Deployment(tp=4, pp=8)
    assert case.query.deployment.gpus == case.num_gpus == 32


def test_structural_limits_of_pipeline_deployments():
    ds = load_model("deepseek-v3")
    assert any("PP2" in p for p in Deployment(dp=8, ep=8, pp=2).problems(ds))
    assert any("exceeds" in p for p in Deployment(pp=64).problems(ds))
    assert Deployment(tp=8, ep=8, pp=4).problems(ds) == []
    assert Deployment(tp=4, pp=2).describe() == "TP4 PP2"
    with pytest.raises(ValueError, match="pp"):
        Deployment(pp=0)


def test_cli_estimate_infer_takes_pp():
    args = ["estimate", "infer", "-m", "llama3-70b", "-g", "h100-sxm", "--input-len", "1024"]
    args += ["--output-len", "1024", "--tp", "4", "--pp", "2", "--precision", "fp8", "--json"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert d["num_gpus"] == 8 and d["deployment"]["pp"] == 2
    assert d["breakdown"]["pp_s"] > 0.0


def test_search_tries_pipeline_stages_unless_told_not_to():
    m = load_model("llama3.1-405b")
    assert all(d.pp == 1 for d in deployments(m, 16, max_pp=1))
    with_pp = deployments(m, 16, max_pp=4)
    assert {d.pp for d in with_pp} == {1, 2, 4} and all(d.gpus <= 16 for d in with_pp)
    assert {d.pp for d in deployments(m, 64)} == {1, 2, 4, 8}  # the default tries up to 8 stages
    kw = dict(input_len=1024, output_len=1024, min_tokens_per_s_per_user=10, max_ttft_ms=5000)
    kw |= dict(precision="fp8", max_gpus=16)
    plain = search_inference("llama3.1-405b", "h100-sxm", max_pp=1, **kw)
    piped = search_inference("llama3.1-405b", "h100-sxm", max_pp=4, **kw)
    assert piped.tried > plain.tried
    assert piped.best.output_tokens_per_s_per_gpu >= plain.best.output_tokens_per_s_per_gpu
