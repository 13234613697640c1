"""Overlapped MoE all-to-all: hidden behind another micro-batch's compute, but holding SMs while it runs."""

from dataclasses import replace

import pytest

from tenfold.perf import Layout, load_hardware, load_model
from tenfold.perf.calibration import load_calibration
from tenfold.perf.specs.precision import get_precision
from tenfold.perf.training.grid import PlanGrid
from tenfold.perf.training.stack import stack
from tenfold.perf.training.step import EP_COMM_SMS, plan_times

LAYOUT = Layout(tp=1, pp=1, dp=64, ep=64, micro_batch=1, recompute="none")


def _times(*, overlap: bool, hw=None):
    sw = stack("megatron-core", ep_overlap=overlap, ep_dedup=True)
    return plan_times(
        load_model("deepseek-v3"),
        hw or load_hardware("h100-sxm"),
        PlanGrid.from_layouts([LAYOUT], default_zero=sw.default_zero),
        precision=get_precision("fp8"),
        software=sw,
        calibration=load_calibration(),
        seq_len=4096,
        global_batch=512,
    )


def test_overlap_hides_most_but_not_all_of_the_all_to_all():
    plain, hidden = _times(overlap=False), _times(overlap=True)
    raw, left = float(plain["ep_s"][0]), float(hidden["ep_s"][0])
    assert 0.0 < left < raw
    assert float(plain["compute_s"][0]) == pytest.approx(float(hidden["compute_s"][0]))
    # on H100 over InfiniBand the exchange fits inside the compute, so what is left is the SM share:
    # the hidden time costs EP_COMM_SMS / (132 - EP_COMM_SMS) of itself
    assert raw < float(plain["compute_s"][0])
    assert left == pytest.approx(raw * EP_COMM_SMS / (132 - EP_COMM_SMS), rel=1e-6)


def test_the_cost_follows_the_gpus_sm_count():
    h100 = load_hardware("h100-sxm")
    bigger = replace(h100, sm_count=264)
    unknown = replace(h100, sm_count=None)
    left = {n: float(_times(overlap=True, hw=hw)["ep_s"][0]) for n, hw in (("132", h100), ("264", bigger))}
    assert left["264"] < left["132"]
    assert float(_times(overlap=True, hw=unknown)["ep_s"][0]) == pytest.approx(0.0)
