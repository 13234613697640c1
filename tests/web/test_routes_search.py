"""POST /api/search/train returns the fastest layouts of the whole grid."""

from tenfold.web.bounds import plan_count


def test_search(client):
    r = client.post(
        "/api/search/train", json={"model": "llama3-8b", "num_gpus": 16, "global_batch": 64, "top": 2}
    )
    assert r.status_code == 200
    d = r.json()["result"]
    assert len(d["top"]) == 2 and d["top"][0]["step_time_s"] <= d["top"][1]["step_time_s"]
    assert d["evaluated"] == plan_count("llama3-8b", 16, 8192, 8, "megatron-core")
