"""The app's error handling: bad input is a 422 naming the field and its range, and no input can name
a server path."""

import pytest


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
