"""POST /api/compare: training and serving comparisons with their table and charts."""


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
