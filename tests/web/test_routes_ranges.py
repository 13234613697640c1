"""The web API answers carry the 80 % ranges of training estimates when the calibration measured them."""

import pytest
from fastapi.testclient import TestClient

from tenfold.web import create_app
from tests.measured import with_uncertainty


@pytest.fixture
def client(monkeypatch):
    with_uncertainty(monkeypatch)
    return TestClient(create_app())


TRAIN = {"model": "llama3-8b", "gpu": "h100-sxm", "tp": 1, "pp": 1, "dp": 8, "global_batch": 64}


def test_estimate_train_has_ranges(client):
    r = client.post("/api/estimate/train", json=TRAIN)
    assert r.status_code == 200, r.text
    d = r.json()["result"]
    lo, hi = d["tokens_per_s_per_gpu_interval"]
    assert lo < d["tokens_per_s_per_gpu"] < hi
    s_lo, s_hi = d["step_time_s_interval"]
    assert s_lo < d["step_time_s"] < s_hi
    step = next(c for c in r.json()["charts"] if "step" in c["key"])
    assert any("error_y" in tr for tr in step["figure"]["data"])


def test_search_train_has_ranges(client):
    body = {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8, "global_batch": 64, "top": 2}
    r = client.post("/api/search/train", json=body)
    assert r.status_code == 200, r.text
    for t in r.json()["result"]["top"]:
        lo, hi = t["tokens_per_s_per_gpu_interval"]
        assert lo < t["tokens_per_s_per_gpu"] < hi


def test_compare_has_ranges_in_rows_table_and_charts(client):
    body = {"kind": "training", "model": "llama3-8b", "tokens": 1e12, "num_gpus": 64}
    r = client.post("/api/compare", json=body | {"gpus": ["h100-sxm", "b200"]})
    assert r.status_code == 200, r.text
    d = r.json()
    row = d["result"]["summary"][1]
    lo, hi = row["speedup_interval"]
    assert lo < row["speedup"] < hi
    assert any(f"({lo:.2f}-{hi:.2f})" in cell for cell in d["table"]["rows"][1])
    assert any("leave-one-source-out" in n for n in d["notes"])
    speed = next(c for c in d["charts"] if c["key"].endswith("_speedup"))
    assert "error_y" in speed["figure"]["data"][0]
