"""POST /api/estimate/train and /api/estimate/infer agree with the Python API; a plan that cannot run is
an answer, not an error."""

import pytest

from tenfold.perf import Layout, estimate_training
from tenfold.perf.defaults import TRAINING
from tenfold.perf.errors import Infeasible
from tenfold.web.routes import estimate as estimate_routes


def test_estimate_train_matches_the_library(client):
    body = {"model": "llama3-70b", "gpu": "h100-sxm", "tp": 4, "pp": 8, "vp": 5, "dp": 2, "precision": "fp8"}
    r = client.post("/api/estimate/train", json=body)
    assert r.status_code == 200
    d = r.json()
    e = estimate_training(
        "llama3-70b",
        "h100-sxm",
        Layout(tp=4, pp=8, vp=5, dp=2),
        seq_len=TRAINING.seq_len,
        global_batch=TRAINING.global_batch,
        precision="fp8",
    )
    assert d["result"]["step_time_s"] == pytest.approx(e.step_time_s, rel=1e-12)
    assert [c["key"] for c in d["charts"]] == ["step_breakdown", "memory"]
    # an infeasible plan is an answer (200, feasible false), not an error
    r = client.post("/api/estimate/train", json={**body, "tp": 1, "pp": 1, "vp": 1, "dp": 8})
    assert r.status_code == 200 and r.json()["result"]["feasible"] is False
    assert "GiB of 80 GiB" in r.json()["result"]["reason"]


def test_estimate_infer_with_curve(client):
    r = client.post("/api/estimate/infer", json={"model": "llama3-70b", "gpu": "b200", "tp": 2})
    assert r.status_code == 200
    d = r.json()
    assert d["result"]["feasible"] and d["result"]["output_tokens_per_s_per_gpu"] > 0
    assert len(d["curve"]["points"]) >= 3
    assert [c["key"] for c in d["charts"]] == ["step_breakdown", "memory", "curve"]
    # a deployment the model cannot use: answered, with the reason
    r = client.post("/api/estimate/infer", json={"model": "llama3-70b", "gpu": "b200", "ep": 2, "tp": 2})
    assert r.status_code == 200 and "needs an MoE model" in r.json()["result"]["reason"]


def test_estimate_train_answers_infeasible(client, monkeypatch):
    # Infeasible is not a ValueError: an estimate that raises it is still a 200 with the reason
    def raise_infeasible(*args, **kwargs):
        raise Infeasible("needs 99 GiB of 80 GiB")

    monkeypatch.setattr(estimate_routes, "estimate_training", raise_infeasible)
    r = client.post("/api/estimate/train", json={})
    assert r.status_code == 200
    assert r.json()["result"] == {"feasible": False, "reason": "needs 99 GiB of 80 GiB"}
