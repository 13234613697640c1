"""A step captured whole as one CUDA graph (Megatron-Core `full_iteration`) runs dropless MoE sync-free, so
the per-MoE-layer host cost (`Calibration.moe_layer_overhead_us`) is not charged; nothing else changes."""

import csv
from dataclasses import replace

import pytest

from tenfold.perf import Layout, load_hardware, load_model
from tenfold.perf.calibration import load_calibration
from tenfold.perf.specs.precision import get_precision
from tenfold.perf.training.grid import PlanGrid
from tenfold.perf.training.stack import CUDA_GRAPH_MODES, stack
from tenfold.perf.training.step import plan_times
from tenfold.perf.validation.training import default_runs_path, load_cases, validate_training

MOE_LAYOUT = Layout(tp=1, pp=1, dp=8, ep=8, micro_batch=4, recompute="none", zero=1)
DENSE_LAYOUT = Layout(tp=8, pp=1, dp=1, micro_batch=1, recompute="none", zero=1)


def _times(model: str, layout: Layout, *, graph: bool, overhead_us: float | None = None) -> dict:
    cal = load_calibration()
    if overhead_us is not None:
        cal = replace(cal, moe_layer_overhead_us=overhead_us)
    return plan_times(
        load_model(model),
        load_hardware("b200"),
        PlanGrid.from_layouts([layout], default_zero=1),
        precision=get_precision("mxfp8"),
        software=stack("megatron-core", full_iteration_graph=graph),
        calibration=cal,
        seq_len=4096,
        global_batch=512,
    )


def test_a_whole_step_graph_removes_exactly_the_moe_layer_cost():
    eager = _times("qwen3-30b-a3b", MOE_LAYOUT, graph=False, overhead_us=1000.0)
    graphed = _times("qwen3-30b-a3b", MOE_LAYOUT, graph=True, overhead_us=1000.0)
    layers, microbatches = load_model("qwen3-30b-a3b").moe_layers, 512 // (8 * 4)
    saved = float(eager["compute_s"][0] - graphed["compute_s"][0])
    # one forward and one backward charge per MoE layer and micro-batch
    assert saved == pytest.approx(2 * layers * microbatches * 1000e-6, rel=1e-9)
    for key in ("ep_s", "dp_s", "optimizer_s"):
        assert float(eager[key][0]) == pytest.approx(float(graphed[key][0]))


def test_without_that_cost_the_graph_changes_nothing():
    a = _times("qwen3-30b-a3b", MOE_LAYOUT, graph=False, overhead_us=0.0)
    b = _times("qwen3-30b-a3b", MOE_LAYOUT, graph=True, overhead_us=0.0)
    assert float(a["step_s"][0]) == float(b["step_s"][0])


def test_dense_models_are_untouched():
    a = _times("llama3-70b", DENSE_LAYOUT, graph=False)
    b = _times("llama3-70b", DENSE_LAYOUT, graph=True)
    assert float(a["step_s"][0]) == float(b["step_s"][0])


def test_the_validation_column_sets_the_stack():
    cases = {c.id: c for c in load_cases()}
    assert cases["mb2606-qwen3-30b-b300-mxfp8"].software.full_iteration_graph
    assert not cases["mb2606-dsv3-b300-mxfp8"].software.full_iteration_graph  # per-layer graphs only
    assert not cases["mbridge-qwen3-30b-h100-fp8"].software.full_iteration_graph  # cell empty
    with open(default_runs_path(), newline="") as fh:
        values = {r["cuda_graph"] for r in csv.DictReader(fh)}
    assert values <= {"", *CUDA_GRAPH_MODES}


def test_an_unknown_cuda_graph_value_names_the_field(tmp_path):
    with open(default_runs_path(), newline="") as fh:
        rows = list(csv.DictReader(fh))
    row = next(r for r in rows if r["id"] == "mb2606-qwen3-30b-b300-mxfp8")
    out = tmp_path / "runs.csv"
    with open(out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(row))
        w.writeheader()
        w.writerow({**row, "id": "bad-graph", "cuda_graph": "whole_step"})
    reasons = dict(validate_training(out).unpredictable)
    assert "cuda_graph 'whole_step'" in reasons["bad-graph"]
