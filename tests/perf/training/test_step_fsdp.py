"""ZeRO-3 / FSDP in the step model: what prefetching cannot hide (step._fsdp_exposed)."""

from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest

from tenfold.perf import Layout, comm, estimate_training, load_hardware, load_model
from tenfold.perf.calibration import load_calibration
from tenfold.perf.specs.precision import get_precision
from tenfold.perf.training import memory
from tenfold.perf.training.grid import PlanGrid
from tenfold.perf.training.stack import stack
from tenfold.perf.training.step import plan_times

MODEL, GPU, SEQ = "llama3-8b", "h100-sxm", 4096


def _times(layouts, *, global_batch, calibration=None, software="megatron-core", seq_len=SEQ):
    sw = stack(software)
    return plan_times(
        load_model(MODEL),
        load_hardware(GPU),
        PlanGrid.from_layouts(layouts, default_zero=sw.default_zero),
        precision=get_precision("bf16"),
        software=sw,
        calibration=calibration or load_calibration(),
        seq_len=seq_len,
        global_batch=global_batch,
    )


def _unit_collectives(lay: Layout):
    """(all-gather, reduce-scatter) seconds of one FSDP unit (one layer's share of the stage's weights)."""
    model, cal = load_model(MODEL), load_calibration()
    links = cal.links(load_hardware(GPU))
    dense, expert = memory.stage_params(model, t=lay.tp, pp=lay.pp, vp=lay.vp, ep=lay.ep)
    assert float(expert) == 0.0
    u = np.ceil(model.layers / (lay.pp * lay.vp)) * lay.vp
    ag = comm.all_gather_time(dense * 2.0 / u, lay.dp * lay.cp, lay.tp, links)
    rs = comm.reduce_scatter_time(dense * stack().grad_reduce_bytes / u, lay.dp * lay.cp, lay.tp, links)
    return float(ag), float(rs)


def test_one_microbatch_zero3_pays_at_least_the_first_gathers_and_last_reduce_scatter():
    # One micro-batch per step: nothing runs before the first unit's weights arrive (forward and
    # backward), and nothing after the last unit's gradients leave.
    lay = Layout(dp=64, micro_batch=1, zero=3)
    t = _times([lay], global_batch=64)
    busy = t["compute_s"] + t["tp_s"] + t["cp_s"] + t["ep_s"] + t["pp_s"]
    ag, rs = _unit_collectives(lay)
    assert float(t["microbatches"][0]) == 1.0
    assert float(t["step_s"][0] - busy[0] - t["optimizer_s"][0]) >= 2 * ag + rs - 1e-12
    assert float(t["fsdp_s"][0]) >= 2 * ag + rs - 1e-12


def test_exposed_gather_grows_with_the_data_parallel_group():
    # Same per-GPU work (one sequence, one micro-batch), larger FSDP group: every ring step adds latency.
    dps = (8, 64, 512, 4096)
    t = {n: _times([Layout(dp=n, micro_batch=1, zero=3)], global_batch=n) for n in dps}
    compute = [float(t[n]["compute_s"][0]) for n in dps]
    assert compute == pytest.approx([compute[0]] * len(dps))
    fsdp = [float(t[n]["fsdp_s"][0]) for n in dps]
    assert all(b > a for a, b in pairwise(fsdp)), fsdp


def test_first_gather_paid_per_microbatch_and_chunk_when_regathering():
    # Megatron-FSDP re-gathers every micro-batch: 2·vp first-unit gathers per micro-batch.
    lay = Layout(dp=64, micro_batch=1, zero=3)
    one = _times([lay], global_batch=64)
    eight = _times([lay], global_batch=8 * 64)
    ag, _ = _unit_collectives(lay)
    assert float(eight["microbatches"][0]) == 8.0
    assert float(eight["fsdp_s"][0] - one["fsdp_s"][0]) >= 7 * 2 * ag - 1e-12


def test_every_unit_pays_its_own_ring_latency_when_compute_is_short():
    # Short sequences: the gathers cannot hide, and each of the u units' 3 collectives (forward gather,
    # backward gather, gradient reduce-scatter) pays (n_dom - 1)·α_out; one stage-wide collective would
    # pay it once (NCCL ring latency, NVIDIA/nccl src/graph/tuning.cc).
    lay = Layout(dp=1024, micro_batch=1, zero=3)
    cal = load_calibration()
    slow = replace(cal, scaleout_latency_us=cal.scaleout_latency_us + 10.0)
    a = _times([lay], global_batch=1024, seq_len=256, calibration=cal)
    b = _times([lay], global_batch=1024, seq_len=256, calibration=slow)
    units = load_model(MODEL).layers
    n_dom = 1024 / load_hardware(GPU).placement_domain
    expected = 3 * units * (n_dom - 1) * 10e-6
    assert float(b["fsdp_s"][0] - a["fsdp_s"][0]) == pytest.approx(expected, rel=1e-6)


def test_long_compute_still_hides_the_rest():
    # The overlapped part stays hidden: with long micro-batches only the first gathers and the last
    # reduce-scatter remain, far below the whole stage's traffic.
    lay = Layout(dp=8, micro_batch=4, zero=3)
    t = _times([lay], global_batch=32, seq_len=8192)
    ag, rs = _unit_collectives(lay)
    assert float(t["fsdp_s"][0]) == pytest.approx(2 * ag + rs, rel=1e-9)


def test_gathers_do_not_hide_behind_exposed_all_to_all():
    # GPT-MoE-1.8T, TP1 PP1 DP8192 EP16 ZeRO-3, one micro-batch (the plan the default comparison used to
    # pick on H100): the EP16 all-to-all leaves the node on the same NICs the expert gathers use, so the
    # FSDP traffic hides behind compute only, not behind the exposed all-to-all.
    model, hw, cal = load_model("gpt-moe-1.8t"), load_hardware(GPU), load_calibration()
    lay = Layout(dp=8192, ep=16, micro_batch=1, recompute="full", zero=3)
    sw = stack()
    t = plan_times(
        model,
        hw,
        PlanGrid.from_layouts([lay], default_zero=1),
        precision=get_precision("fp8"),
        software=sw,
        calibration=cal,
        seq_len=8192,
        global_batch=8192,
    )
    links = cal.links(hw)
    dense, expert = memory.stage_params(model, t=1, pp=1, vp=1, ep=16)
    u = model.layers

    def unit(coll, b):
        return coll(dense * b / u, 8192, 1, links) + coll(expert * b / u, 512, 16, links)

    raw = u * (2 * unit(comm.all_gather_time, 2.0) + unit(comm.reduce_scatter_time, sw.grad_reduce_bytes))
    assert float(t["ep_s"][0]) > 0.0
    assert float(t["fsdp_s"][0]) >= float(raw - t["compute_s"][0]) - 1e-9


def test_full_zero3_over_8192_h100_no_longer_beats_a_megatron_layout():
    # Issue 14: GPT-MoE-1.8T on 8,192 H100 was planned as TP1 PP1 DP8192 EP16 ZeRO-3 because its gathers
    # cost nothing; the TP/PP/EP layout family NVIDIA publishes at this scale (Megatron-Bridge DeepSeek-V3
    # TP2 PP16 EP64, Llama 3.1 405B TP8 PP8 CP2, GPT-3 175B TP4 PP8) is now faster.
    kw = dict(seq_len=8192, global_batch=8192, precision="fp8")
    zero3 = estimate_training(
        "gpt-moe-1.8t", GPU, Layout(dp=8192, ep=16, micro_batch=1, recompute="full", zero=3), **kw
    )
    mcore = estimate_training(
        "gpt-moe-1.8t", GPU, Layout(tp=4, pp=8, vp=5, dp=64, cp=4, ep=16, micro_batch=1, zero=2), **kw
    )
    assert zero3.feasible and mcore.feasible
    assert zero3.breakdown.fsdp_s > zero3.breakdown.ep_s / 2
    assert mcore.tokens_per_s_per_gpu > zero3.tokens_per_s_per_gpu
