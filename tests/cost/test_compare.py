"""`compare_*`: the embedded default across the five GPUs, a deadline run, a serving load, bad input."""

import json
import math

import pytest

from tenfold.cost.compare import compare_default, compare_training, gpu_ladder
from tenfold.cost.compare_serving import compare_serving
from tenfold.cost.defaults import gpu_facts
from tenfold.cost.workloads import DEFAULT_GPUS, CostSettings, ServingWorkload, TrainingWorkload
from tenfold.perf.specs.hardware import load_hardware


@pytest.fixture(scope="module")
def default():
    return compare_default()


def test_default_scenario_has_both_workloads_on_all_five_gpus(default):
    assert [c.workload.model for c in default.comparisons] == ["gpt-moe-1.8t", "llama3.1-405b"]
    for c in default.comparisons:
        assert [r.hardware for r in c.rows] == list(DEFAULT_GPUS)
        assert all(r.feasible for r in c.rows), [r.reason for r in c.rows]
        base = c.row("h100-sxm")
        assert base.speedup == 1.0 and base.rent_cost_ratio == 1.0 and base.own_cost_ratio == 1.0
        for r in c.rows:
            hopper = not load_hardware(r.hardware).block_scaled_formats
            assert r.precision in (("bf16", "fp8") if hopper else ("fp8", "mxfp8", "nvfp4"))
            assert r.num_gpus == c.num_gpus
            # the days follow from the model's throughput; GPU-hours, money and energy from the days
            assert r.days == pytest.approx(c.workload.tokens / (r.tokens_per_s_per_gpu * r.num_gpus) / 86400)
            assert r.gpu_hours == pytest.approx(r.num_gpus * r.days * 24)
            assert r.money.rent_usd == pytest.approx(r.gpu_hours * r.money.rent.usd_h)
            assert r.money.own_usd == pytest.approx(r.gpu_hours * r.money.own.usd_per_busy_gpu_hour)
            fp = r.money.footprint
            assert fp.facility_MWh == pytest.approx(
                r.gpu_hours * gpu_facts(load_hardware(r.hardware)).it_kW * fp.pue / 1e3
            )
            assert fp.co2_t == pytest.approx(fp.facility_MWh * 367.0 / 1e3)
            assert r.speedup == pytest.approx(r.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu)
        # Blackwell is faster per GPU than Hopper, and H200 is no slower than H100
        for name in ("b200", "gb200", "gb300"):
            assert c.row(name).speedup > 1.5
        assert c.row("h200").speedup >= 0.99


def test_default_json_is_plain_data(default):
    d = json.loads(json.dumps(default.to_dict(), default=lambda x: None))
    assert len(d["comparisons"]) == 2
    s = d["comparisons"][0]["summary"][0]
    for key in (
        "hardware",
        "precision",
        "num_gpus",
        "days",
        "mfu",
        "gpu_hours",
        "rent_usd",
        "own_usd",
        "facility_MWh",
        "co2_t",
        "speedup",
        "rent_cost_ratio",
        "own_cost_ratio",
    ):
        assert key in s, key


def test_a_precision_restriction_holds():
    w = TrainingWorkload(model="llama3-8b", tokens=1e12, global_batch=256)
    c = compare_training(w, ["h100-sxm", "b200"], num_gpus=64, precisions=("fp8",))
    assert [r.precision for r in c.rows] == ["fp8", "fp8"]
    with pytest.raises(ValueError, match="nope"):
        compare_training(w, ["b200"], num_gpus=64, precisions=("nope",))


def test_deadline_finds_the_fewest_gpus_on_the_ladder():
    w = TrainingWorkload(model="llama3-8b", tokens=2e12, global_batch=512)
    c = compare_training(w, ["h100-sxm", "gb200"], deadline_days=10, max_gpus=4096)
    ladder = gpu_ladder(4096)
    for r in c.rows:
        assert r.feasible and r.days <= 10
        smaller = [n for n in ladder if n < r.num_gpus]
        if smaller:
            one_less = compare_training(w, [r.hardware], num_gpus=smaller[-1]).rows[0]
            assert one_less.days > 10
    assert c.row("gb200").num_gpus < c.row("h100-sxm").num_gpus


def test_deadline_too_tight_is_infeasible_with_the_numbers():
    w = TrainingWorkload(model="llama3-70b", tokens=15e12, global_batch=512)
    c = compare_training(w, ["h100-sxm"], deadline_days=1, max_gpus=256)
    r = c.rows[0]
    assert not r.feasible and "deadline" in r.reason and not c.feasible
    assert math.isnan(r.speedup)


def test_serving_carries_the_demand_at_the_interactivity():
    w = ServingWorkload(
        model="llama3-8b",
        input_len=1024,
        output_len=256,
        output_tokens_per_s=50_000,
        min_tokens_per_s_per_user=50,
        max_ttft_s=2.0,
        days=7,
    )
    c = compare_serving(w, ["h100-sxm", "b200"])
    for r in c.rows:
        assert r.feasible and r.tokens_per_s_per_user >= 50 and r.ttft_ms <= 2000
        assert r.tokens_per_s_per_gpu * r.num_gpus >= 50_000
        assert r.gpu_hours == pytest.approx(r.num_gpus * 24 * 7)
        m_tokens = 50_000 * 7 * 86400 / 1e6
        assert r.rent_usd_per_m_tokens == pytest.approx(r.money.rent_usd / m_tokens)
    assert c.row("b200").speedup > 1


def test_settings_change_the_money_not_the_time():
    w = TrainingWorkload(model="llama3-8b", tokens=1e12, global_batch=256)
    a = compare_training(w, ["h100-sxm"], num_gpus=64).rows[0]
    b = compare_training(
        w,
        ["h100-sxm"],
        num_gpus=64,
        settings=CostSettings(
            rent_basis="ondemand",
            grid="france",
            own={"life_years": 6.0},
            per_gpu={"h100-sxm": {"capex_usd": 40_000.0}},
        ),
    ).rows[0]
    assert a.days == b.days
    assert b.money.rent.usd_h == 6.88 and b.money.own_usd < a.money.own_usd
    assert b.money.footprint.co2_t < a.money.footprint.co2_t / 6


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "exactly one"),
        ({"num_gpus": 8, "deadline_days": 3}, "exactly one"),
        ({"num_gpus": 0}, "num_gpus"),
        ({"num_gpus": 8, "baseline": "a100-80gb"}, "baseline"),
    ],
)
def test_bad_input(kwargs, match):
    w = TrainingWorkload(model="llama3-8b", tokens=1e12, global_batch=256)
    with pytest.raises(ValueError, match=match):
        compare_training(w, ["h100-sxm"], **kwargs)
    with pytest.raises(ValueError, match="tokens"):
        TrainingWorkload(model="llama3-8b", tokens=-1)
    with pytest.raises(ValueError, match="own-cost"):
        CostSettings(own={"pue_typo": 1.0})


def test_uncalibrated_hardware_is_marked_in_rows_json_cells_and_notes():
    """MI300X has no fitted runs: its row says so in the JSON, in the table cells every renderer shares, and
    in a note; H100, which the fit covers, carries no mark."""
    from tenfold.report.compare import UNCALIBRATED_MARK, comparison_rows, uncalibrated_note

    w = TrainingWorkload(model="llama3-8b", tokens=1e12, global_batch=256)
    c = compare_training(w, ["h100-sxm", "mi300x"], num_gpus=64, precisions=("bf16",))
    by_gpu = {d["hardware"]: d for d in c.to_dict()["rows"]}
    assert by_gpu["h100-sxm"]["calibrated"] is True and by_gpu["mi300x"]["calibrated"] is False
    cells = {r[0] for r in comparison_rows(c)[1]}
    assert cells == {"h100-sxm", f"mi300x {UNCALIBRATED_MARK}"}
    assert "mi300x" in uncalibrated_note(c) and "h100-sxm" not in uncalibrated_note(c)


def test_uncalibrated_serving_rows_are_marked():
    w = ServingWorkload(
        model="llama3-8b",
        input_len=1024,
        output_len=256,
        output_tokens_per_s=1e4,
        min_tokens_per_s_per_user=50,
        max_ttft_s=2.0,
    )
    c = compare_serving(w, ["h100-sxm", "mi300x"], precisions=("bf16",))
    flags = {r.hardware: r.calibrated for r in c.rows if r.feasible}
    assert flags == {"h100-sxm": True, "mi300x": False}
