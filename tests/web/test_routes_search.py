"""POST /api/search/train returns the fastest layouts of the whole grid."""

from tenfold.perf.errors import Infeasible
from tenfold.web.bounds import plan_count
from tenfold.web.routes import search as search_routes


def test_search(client):
    r = client.post(
        "/api/search/train", json={"model": "llama3-8b", "num_gpus": 16, "global_batch": 64, "top": 2}
    )
    assert r.status_code == 200
    d = r.json()["result"]
    assert len(d["top"]) == 2 and d["top"][0]["step_time_s"] <= d["top"][1]["step_time_s"]
    assert d["evaluated"] == plan_count("llama3-8b", 16, 8192, 8, "megatron-core")


def test_search_answers_infeasible_as_bad_input(client, monkeypatch):
    def raise_infeasible(*args, **kwargs):
        raise Infeasible("no layout fits")

    monkeypatch.setattr(search_routes, "search_training", raise_infeasible)
    r = client.post("/api/search/train", json={"model": "llama3-8b", "num_gpus": 8})
    assert r.status_code == 422 and r.json()["message"] == "no layout fits"
