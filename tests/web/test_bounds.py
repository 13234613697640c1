"""Work is bounded: the grid count matches the search, and large grids, slow requests and too many at once
get a 422, 503 or 429."""

import pytest
from fastapi.testclient import TestClient

from tenfold.perf.defaults import MAX_COMPARE_PLANS
from tenfold.perf.specs.models import load_model
from tenfold.perf.training.search import enumerate_plans
from tenfold.web import create_app
from tenfold.web.bounds import bisection_cost, compare_plan_bound, plan_count
from tenfold.web.schemas import CompareRequest


@pytest.mark.parametrize(("model", "n", "seq"), [("llama3-8b", 16, 8192), ("mixtral-8x7b", 48, 4096)])
def test_plan_count_is_the_search_grid(model, n, seq):
    grid = len(enumerate_plans(load_model(model), n, seq_len=seq))
    assert plan_count(model, n, seq, 8, "megatron-core") == grid


def test_work_is_bounded(client):
    r = client.post("/api/search/train", json={"model": "llama3-70b", "num_gpus": 55440})
    assert r.status_code == 422 and "layouts to search; allowed: at most 4,000,000" in r.json()["message"]
    r = client.post("/api/compare", json={"model": "gpt-moe-1.8t", "num_gpus": None, "deadline_days": 90})
    assert r.status_code == 422 and "is too large a comparison to answer here" in r.json()["message"]
    # the time limit stops a search between chunks; beyond the heavy slots the answer is 429
    slow = TestClient(create_app(time_limit_s=1e-9))
    r = slow.post("/api/search/train", json={"model": "llama3-8b", "num_gpus": 16, "global_batch": 64})
    assert r.status_code == 503 and "time limit" in r.json()["message"]
    busy = TestClient(create_app(heavy_slots=0))
    r = busy.post("/api/search/train", json={"model": "llama3-8b", "num_gpus": 16, "global_batch": 64})
    assert r.status_code == 429 and "busy" in r.json()["message"]


def bisect_probes(n: int, first_ok: int) -> list[int]:
    """The rungs a deadline search probes on a ladder of n rungs when rung `first_ok` and above meet the
    deadline (as tenfold.cost.compare does: the top rung, then a bisection)."""
    probed, lo, hi = [n - 1], 0, n - 1
    while lo < hi:
        mid = (lo + hi) // 2
        probed.append(mid)
        lo, hi = (lo, mid) if mid >= first_ok else (mid + 1, hi)
    return probed


@pytest.mark.parametrize("costs", [[5, 1, 7, 2, 9, 3, 8], list(range(1, 20)), [4], [3, 1]])
def test_bisection_cost_is_the_costliest_path(costs):
    paths = [sum(costs[i] for i in bisect_probes(len(costs), t)) for t in range(len(costs))]
    assert bisection_cost(costs) == max(paths)


def test_default_deadline_request_fits_the_bound():
    # the page's deadline mode with its other fields at their defaults (was 33,835,620 layouts: a 422)
    req = CompareRequest(tokens=15e12, num_gpus=None, deadline_days=30)
    assert compare_plan_bound(req) <= MAX_COMPARE_PLANS
