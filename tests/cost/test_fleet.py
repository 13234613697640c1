"""Fleet planner: the MILP against brute force over every assignment, objectives, infeasibility reasons."""

import itertools
import math
from pathlib import Path

import pytest

from tenfold.cost.fleet import fleet_from_dict, load_fleet, plan_fleet

EXAMPLE = Path(__file__).parents[2] / "examples" / "fleet.toml"


def small(**over):
    d = {
        "objective": "cost",
        "pool": [
            {"name": "hop", "gpu": "h100-sxm", "count": 128, "basis": "own"},
            {"name": "bw", "gpu": "b200", "count": 64, "basis": "reserved"},
        ],
        "job": [
            {
                "name": "a",
                "kind": "training",
                "model": "llama3-8b",
                "tokens": 3e11,
                "global_batch": 256,
                "deadline_days": 10,
            },
            {
                "name": "b",
                "kind": "training",
                "model": "llama3-8b",
                "tokens": 2e11,
                "global_batch": 256,
                "deadline_days": 6,
            },
            {
                "name": "s",
                "kind": "serving",
                "model": "llama3-8b",
                "input_len": 1024,
                "output_len": 256,
                "output_tokens_per_s": 20000,
                "min_tokens_per_s_per_user": 50,
                "max_ttft_s": 2.0,
                "days": 7,
            },
        ],
    }
    return d | over


def brute(spec, options, pools, makespan=False):
    """Every combination of one option per job that fits the pools; the best by the objective."""
    by_job = [[o for o in options if o.job == j.name and o.pool in pools] for j in spec.jobs]
    best = None
    training = {j.name for j in spec.jobs if j.workload.kind == "training"}
    for combo in itertools.product(*by_job):
        if any(sum(o.num_gpus for o in combo if o.pool == p.name) > p.count for p in spec.pools):
            continue
        key = (
            (max(o.days for o in combo if o.job in training), 0) if makespan else (sum(o.usd for o in combo),)
        )
        cost = sum(o.usd for o in combo)
        key = (key[0], cost)
        if best is None or key < best[0]:
            best = (key, combo)
    return best


@pytest.fixture(scope="module")
def spec_and_plan():
    spec = fleet_from_dict(small())
    return spec, plan_fleet(spec)


def test_milp_matches_brute_force_on_cost(spec_and_plan):
    spec, r = spec_and_plan
    assert r.best.feasible and len(r.options) > 6
    key, _ = brute(spec, r.options, {"hop", "bw"})
    assert r.best.total_usd == pytest.approx(key[0], rel=1e-9)
    for o in r.best.assignments:
        job = next(j for j in spec.jobs if j.name == o.job)
        if job.deadline_days is not None:
            assert o.days <= job.deadline_days
    for p in spec.pools:
        assert r.best.gpus_used[p.name] <= p.count
    for naive in r.naive:
        if naive.feasible:
            assert naive.total_usd >= r.best.total_usd * (1 - 1e-9)


def test_makespan_objective_matches_brute_force(spec_and_plan):
    spec, r = spec_and_plan
    m = plan_fleet(fleet_from_dict(small(objective="makespan")))
    key, _ = brute(spec, r.options, {"hop", "bw"}, makespan=True)
    assert m.best.makespan_days == pytest.approx(key[0], rel=1e-9)
    assert m.best.makespan_days <= r.best.makespan_days
    assert m.best.total_usd >= r.best.total_usd * (1 - 1e-9)


def test_a_deadline_no_pool_meets_is_named():
    d = small()
    d["job"][0] = d["job"][0] | {"tokens": 1e13, "deadline_days": 2}
    r = plan_fleet(fleet_from_dict(d | {"job": d["job"][:1]}))
    assert not r.best.feasible
    assert "no pool can run a" in r.best.reason and "deadline" in r.best.reason


def test_capacity_shortfall_is_named():
    # one 16-GPU pool: each job fits alone (8, 8 and a few GPUs) but not all three at once
    d = small(pool=[{"name": "hop", "gpu": "h100-sxm", "count": 16, "basis": "own"}])
    d["job"] = [j | {"deadline_days": 60} if j["kind"] == "training" else j for j in d["job"]]
    r = plan_fleet(fleet_from_dict(d))
    assert not r.best.feasible
    assert "pool capacity" in r.best.reason and "hop 16" in r.best.reason


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"objective": "speed"}, "objective"),
        ({"pool": []}, "at least one"),
        ({"pool": [{"name": "x", "gpu": "h100-sxm", "count": 0}]}, "count"),
        ({"pool": [{"name": "x", "gpu": "h100-sxm", "count": 8, "basis": "lease"}]}, "basis"),
    ],
)
def test_bad_fleet_files(change, match):
    with pytest.raises(ValueError, match=match):
        fleet_from_dict(small(**change))


def test_training_job_needs_a_deadline():
    d = small()
    d["job"][0] = {k: v for k, v in d["job"][0].items() if k != "deadline_days"}
    with pytest.raises(ValueError, match="deadline_days"):
        fleet_from_dict(d)


def test_shipped_example_plans_and_beats_the_naive_plans():
    r = plan_fleet(load_fleet(EXAMPLE))
    assert r.best.feasible
    feasible = [p for p in r.naive if p.feasible]
    assert feasible and all(p.total_usd > r.best.total_usd for p in feasible)
    assert any(not p.feasible and "pool capacity" in p.reason for p in r.naive)
    assert math.isfinite(r.best.makespan_days)
