"""PlanGrid: layouts round-trip through the struct of arrays, and count_plans counts the search's grid."""

import numpy as np
import pytest

from tenfold.perf import Layout, load_model
from tenfold.perf.training.grid import PlanGrid, count_plans, search_chunks
from tenfold.perf.training.layout import RECOMPUTE, RECOMPUTE_CODE, divisors
from tenfold.perf.training.search import enumerate_plans
from tenfold.perf.training.stack import stack


def test_layouts_round_trip():
    lays = [
        Layout(
            tp=2,
            pp=4,
            vp=2,
            dp=8,
            cp=2,
            ep=4,
            sp=True,
            micro_batch=2,
            recompute="full",
            recompute_layers=3,
            zero=3,
        ),
        Layout(tp=1, pp=1, dp=16, recompute="selective"),
        Layout(tp=8, pp=2, dp=1, sp=False, recompute="none", zero=0),
    ]
    grid = PlanGrid.from_layouts(lays, default_zero=1)
    assert len(grid) == 3
    assert grid.layout(0) == lays[0]
    # defaults come back explicit: sequence parallelism from tp, the ZeRO stage from the software default
    assert grid.layout(1) == Layout(tp=1, pp=1, dp=16, sp=False, recompute="selective", zero=1)
    assert grid.layout(2) == Layout(tp=8, pp=2, dp=1, sp=False, recompute="none", zero=0)
    assert np.isnan(grid.recompute_layers[1])


def test_grid_selects_and_concatenates():
    grid = PlanGrid.from_layouts([Layout(tp=t, dp=8 // t) for t in (1, 2, 4, 8)], default_zero=1)
    picked = grid.select(grid.tp >= 4)
    assert list(picked.tp) == [4, 8] and list(picked.dp) == [2, 1]
    both = PlanGrid.concat([picked, grid.select(np.array([0]))])
    assert list(both.tp) == [4, 8, 1]
    with pytest.raises(ValueError, match="shape"):
        PlanGrid(**{**{k: getattr(grid, k) for k in grid.__dataclass_fields__}, "zero": np.zeros(2)})


def test_recompute_vocabulary_is_one():
    assert RECOMPUTE == ("none", "selective", "full")
    assert [RECOMPUTE_CODE[r] for r in RECOMPUTE] == [0, 1, 2]


def test_divisors():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(1) == [1]
    with pytest.raises(ValueError, match="0"):
        divisors(0)


@pytest.mark.parametrize(
    ("model", "n", "seq", "max_vp", "software"),
    [
        ("llama3-8b", 16, 8192, 8, "megatron-core"),
        ("mixtral-8x7b", 48, 4096, 8, "megatron-core"),
        ("qwen3-30b-a3b", 32, 4096, 4, "megatron-core"),
        ("llama3-70b", 96, 4096, 8, "megatron-deepspeed-2021"),
    ],
)
def test_count_plans_is_the_search_grid(model, n, seq, max_vp, software):
    m = load_model(model)
    grid = enumerate_plans(m, n, seq_len=seq, max_vp=max_vp, software=stack(software))
    assert count_plans(model, n, seq_len=seq, max_vp=max_vp, software=software) == len(grid)
    chunks = search_chunks(m, n, seq_len=seq, max_vp=max_vp, software=stack(software))
    assert sum(len(c) for c in chunks) == len(grid)
