"""search_training: the vectorised grid agrees with the plain per-plan loop, and counts every plan."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenfold.perf.training.search import NEAR_TIE, search_training, search_training_reference


@pytest.mark.parametrize(
    ("model", "gpu", "n", "seq", "gbs", "prec"),
    [
        ("llama3-8b", "h100-sxm", 16, 8192, 64, "fp8"),
        ("qwen3-30b-a3b", "b200", 16, 4096, 256, "mxfp8"),
    ],
)
def test_fast_search_equals_reference(model, gpu, n, seq, gbs, prec):
    kw = dict(
        seq_len=seq,
        global_batch=gbs,
        precision=prec,
        top_k=5,
        max_vp=2,
        micro_batches=(1, 2),
        zero_stages=(1, 3),
    )
    fast = search_training(model, gpu, n, **kw)
    ref = search_training_reference(model, gpu, n, **kw)
    assert fast.evaluated == ref.evaluated and fast.valid == ref.valid and fast.fits == ref.fits
    assert fast.rejected == ref.rejected
    assert [e.step_time_s for e in fast.top] == [e.step_time_s for e in ref.top]
    assert [e.layout for e in fast.top] == [e.layout for e in ref.top]


@settings(max_examples=8)
@given(
    n=st.sampled_from([8, 16, 24, 64]),
    gbs=st.sampled_from([64, 128, 192]),
    model=st.sampled_from(["llama3-8b", "mixtral-8x7b"]),
)
def test_search_invariants(n, gbs, model):
    r = search_training(
        model,
        "h100-sxm",
        n,
        seq_len=4096,
        global_batch=gbs,
        precision="bf16",
        top_k=3,
        max_vp=2,
        micro_batches=(1, 2),
    )
    assert r.evaluated == r.fits + sum(r.rejected.values())
    assert r.valid == r.fits + r.rejected.get("memory", 0)
    steps = [e.step_time_s for e in r.top]
    # near-ties with the fastest come first (simplest layout first), then the rest by speed
    tied = [t <= min(steps) * (1 + NEAR_TIE) for t in steps]
    assert tied == sorted(tied, reverse=True)
    assert steps[sum(tied) :] == sorted(steps[sum(tied) :])
    for e in r.top:
        lay = e.layout
        assert lay.tp * lay.pp * lay.dp * lay.cp == n
        assert e.feasible and e.reason == ""


def test_search_reports_infeasible_and_bad_input():
    r = search_training("llama3.1-405b", "h100-sxm", 8, seq_len=8192, global_batch=16, top_k=3)
    assert r.top == () and r.rejected["memory"] > 0
    with pytest.raises(ValueError, match="fp4"):
        search_training("llama3-8b", "h100-sxm", 8, seq_len=8192, global_batch=16, precision="nvfp4")


def test_near_ties_go_to_the_simpler_layout():
    """Plans within 1 % of the fastest are ranked least context parallelism first, then fewest virtual
    and pipeline stages; slower plans stay in speed order."""
    import numpy as np

    from tenfold.perf import Layout
    from tenfold.perf.training.grid import PlanGrid
    from tenfold.perf.training.search import NEAR_TIE, rank_plans

    lays = [
        Layout(tp=1, pp=8, vp=5, dp=16, cp=8),
        Layout(tp=4, pp=8, vp=5, dp=16, cp=2),
        Layout(tp=8, pp=8, vp=1, dp=16, cp=1),
        Layout(tp=8, pp=16, vp=1, dp=8, cp=1),
    ]
    grid = PlanGrid.from_layouts(lays, default_zero=1)
    step = np.array([10.0, 10.0 * (1 + NEAR_TIE / 2), 10.0 * (1 + 2 * NEAR_TIE), 10.05])
    assert list(rank_plans(step, grid)) == [3, 1, 0, 2]
