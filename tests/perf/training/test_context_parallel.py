"""Context parallelism exchanges each TP rank's own KV heads, not the whole model's."""

import pytest

from tenfold.perf import Layout, comm, load_hardware, load_model
from tenfold.perf.calibration import load_calibration
from tenfold.perf.specs.precision import get_precision
from tenfold.perf.training.grid import PlanGrid
from tenfold.perf.training.stack import stack
from tenfold.perf.training.step import plan_times

SEQ = 131072


def _cp_seconds(model_name: str, tp: int, cp: int = 16):
    model, hw, cal = load_model(model_name), load_hardware("h100-sxm"), load_calibration()
    sw = stack("meta-llama3", cp_comm="allgather")
    lay = Layout(tp=tp, pp=1, dp=1, cp=cp, micro_batch=1, recompute="full", zero=3)
    out = plan_times(
        model,
        hw,
        PlanGrid.from_layouts([lay], default_zero=sw.default_zero),
        precision=get_precision("bf16"),
        software=sw,
        calibration=cal,
        seq_len=SEQ,
        global_batch=1,
    )
    return model, cal.links(hw), float(out["cp_s"][0])


@pytest.mark.parametrize(
    ("name", "tp", "heads_per_rank"), [("llama3.1-405b", 8, 1), ("llama3-70b", 2, 4), ("llama3-8b", 16, 1)]
)
def test_all_gather_carries_the_ranks_kv_heads(name, tp, heads_per_rank):
    """Llama 3's all-gather CP (arXiv 2407.21783 §3.3.2): each rank gathers K and V of its own KV heads
    from the cp ranks, once forward and twice backward (full recomputation repeats nothing here); with
    more TP ranks than KV heads (8B at TP16) each rank keeps one replicated head."""
    model, links, got = _cp_seconds(name, tp)
    chunk = SEQ / 16 * heads_per_rank * (model.qk_head_dim + model.v_dim) * 2.0
    one = float(comm.all_gather_time(16 * chunk, 16, tp, links))
    assert got == pytest.approx(model.layers * 3.0 * one, rel=1e-9)
