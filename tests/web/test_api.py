"""Every endpoint through FastAPI's TestClient: the answers agree with the Python API, bad input is a 422
naming the field and its range, no input can name a server path, and work is bounded."""

import pytest
from fastapi.testclient import TestClient

from tenfold.perf import Layout, estimate_training
from tenfold.perf.specs.models import load_model
from tenfold.perf.training.search import enumerate_plans
from tenfold.web import create_app
from tenfold.web.app import plan_count
from tenfold.web.schemas import GPU_NAMES, MODEL_NAMES


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app())


def test_catalog(client):
    r = client.get("/api/catalog")
    assert r.status_code == 200
    d = r.json()
    assert [m["name"] for m in d["models"]] == list(MODEL_NAMES)
    b200 = next(h for h in d["hardware"] if h["name"] == "b200")
    assert b200["hbm_GiB"] > 170 and "nvfp4" in b200["block_scaled_formats"]
    assert [h["name"] for h in d["hardware"]] == list(GPU_NAMES)


def test_estimate_train_matches_the_library(client):
    body = {"model": "llama3-70b", "gpu": "h100-sxm", "tp": 4, "pp": 8, "vp": 5, "dp": 2, "precision": "fp8"}
    r = client.post("/api/estimate/train", json=body)
    assert r.status_code == 200
    d = r.json()
    e = estimate_training(
        "llama3-70b",
        "h100-sxm",
        Layout(tp=4, pp=8, vp=5, dp=2),
        seq_len=8192,
        global_batch=256,
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


def test_search(client):
    r = client.post(
        "/api/search/train", json={"model": "llama3-8b", "num_gpus": 16, "global_batch": 64, "top": 2}
    )
    assert r.status_code == 200
    d = r.json()["result"]
    assert len(d["top"]) == 2 and d["top"][0]["step_time_s"] <= d["top"][1]["step_time_s"]
    assert d["evaluated"] == plan_count("llama3-8b", 16, 8192, 8, "megatron-core")


@pytest.mark.parametrize(("model", "n", "seq"), [("llama3-8b", 16, 8192), ("mixtral-8x7b", 48, 4096)])
def test_plan_count_is_the_search_grid(model, n, seq):
    grid = sum(len(c["tp"]) for c in enumerate_plans(load_model(model), n, seq_len=seq))
    assert plan_count(model, n, seq, 8, "megatron-core") == grid


def test_compare_training_and_serving(client):
    body = {
        "model": "llama3-8b",
        "tokens": 1e12,
        "num_gpus": 64,
        "gpus": ["h100-sxm", "b200"],
        "global_batch": 512,
    }
    r = client.post("/api/compare", json=body)
    assert r.status_code == 200
    d = r.json()
    assert [row[0] for row in d["table"]["rows"]] == ["h100-sxm", "b200"]
    assert {"c0_cost", "c0_days", "c0_energy", "c0_step", "c0_memory", "c0_tornado"} <= {
        c["key"] for c in d["charts"]
    }
    b200 = next(s for s in d["result"]["summary"] if s["hardware"] == "b200")
    assert b200["speedup"] > 1.5
    r = client.post("/api/compare", json={"kind": "serving", "model": "llama3-8b", "gpus": ["h200", "b200"]})
    assert r.status_code == 200 and "c0_curve" in {c["key"] for c in r.json()["charts"]}


@pytest.mark.parametrize(
    ("path", "body", "field", "allowed"),
    [
        ("/api/estimate/train", {"seq_len": 0}, "seq_len", "allowed: 1 to 1048576"),
        ("/api/estimate/train", {"dp": 10**9}, "dp", "allowed: 1 to 65536"),
        ("/api/estimate/infer", {"concurrency": -1}, "concurrency", "allowed: 0 to 1000000"),
        ("/api/search/train", {"num_gpus": 0}, "num_gpus", "allowed: 1 to 65536"),
        ("/api/search/train", {"top": 99}, "top", "allowed: 1 to 20"),
        ("/api/compare", {"tokens": 1.0}, "tokens", "allowed: 1e+06 to 1e+15"),
        ("/api/compare", {"gpus": []}, "gpus", ""),
    ],
)
def test_bad_numbers_name_field_and_range(client, path, body, field, allowed):
    r = client.post(path, json=body)
    assert r.status_code == 422
    d = r.json()
    assert d["message"].startswith(f"{field}: ")
    assert allowed in d["message"]
    assert d["detail"][0]["loc"] == ["body", field]


@pytest.mark.parametrize("name", ["/etc/passwd", "../../models/llama3-70b.toml", "Llama-3-70B"])
def test_no_input_names_a_path(client, name):
    for path, key in (
        ("/api/estimate/train", "model"),
        ("/api/estimate/infer", "gpu"),
        ("/api/compare", "model"),
    ):
        r = client.post(path, json={key: name})
        assert r.status_code == 422
        assert "Input should be" in r.json()["message"]  # only the catalog names are allowed


def test_cross_field_rules(client):
    r = client.post("/api/estimate/train", json={"tp": 1024, "pp": 1024, "dp": 1})
    assert r.status_code == 422 and "allowed: 1 to 65,536" in r.json()["message"]
    r = client.post("/api/compare", json={"num_gpus": None, "deadline_days": None})
    assert r.status_code == 422 and "exactly one of num_gpus" in r.json()["message"]
    r = client.post("/api/compare", json={"gpus": ["b200", "b200"]})
    assert r.status_code == 422 and "at most once" in r.json()["message"]
    r = client.post("/api/estimate/train", json={"bogus": 1})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "bogus"]
    r = client.post("/api/estimate/train", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422


def test_work_is_bounded(client):
    r = client.post("/api/search/train", json={"model": "llama3-70b", "num_gpus": 55440})
    assert r.status_code == 422 and "layouts to search; allowed: at most 4,000,000" in r.json()["message"]
    r = client.post("/api/compare", json={"model": "gpt-moe-1.8t", "num_gpus": None, "deadline_days": 90})
    assert r.status_code == 422 and "layouts; allowed: at most" in r.json()["message"]
    # the time limit stops a search between chunks; beyond the heavy slots the answer is 429
    slow = TestClient(create_app(time_limit_s=1e-9))
    r = slow.post("/api/search/train", json={"model": "llama3-8b", "num_gpus": 16, "global_batch": 64})
    assert r.status_code == 503 and "time limit" in r.json()["message"]
    busy = TestClient(create_app(heavy_slots=0))
    r = busy.post("/api/search/train", json={"model": "llama3-8b", "num_gpus": 16, "global_batch": 64})
    assert r.status_code == 429 and "busy" in r.json()["message"]


def test_page_and_bundle(client):
    page = client.get("/")
    assert page.status_code == 200 and '<script src="/static/plotly.js">' in page.text
    assert "https://" not in page.text and "http://" not in page.text
    js = client.get("/static/plotly.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("application/javascript")
    assert "plotly.js" in js.text[:200]
    schema = client.get("/openapi.json").json()
    assert {
        "/api/catalog",
        "/api/estimate/train",
        "/api/estimate/infer",
        "/api/search/train",
        "/api/compare",
    } == set(schema["paths"])
    assert client.get("/docs").status_code == 404  # the Swagger page would load a CDN script
