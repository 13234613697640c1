"""One set of defaults: the API's training questions assume what the CLI assumes
(`tenfold.perf.defaults.TRAINING`), an estimate's layout fields left out are the plain layout (no
interleaving, no tuned pipeline), and every answer states the assumptions that change it."""

import pytest

from tenfold.perf import Layout, estimate_training
from tenfold.perf.defaults import TRAINING
from tenfold.web.schemas import CompareRequest, SearchRequest, TrainEstimateRequest


@pytest.mark.parametrize("model", [TrainEstimateRequest, SearchRequest, CompareRequest])
def test_training_defaults_are_the_libraries(model):
    fields = model.model_fields
    assert fields["seq_len"].default == TRAINING.seq_len
    assert fields["global_batch"].default == TRAINING.global_batch
    if model is not CompareRequest:  # a comparison's default is the best precision per GPU
        assert fields["precision"].default == TRAINING.precision
        assert fields["software"].default == TRAINING.software
    if model is SearchRequest:
        assert fields["max_vp"].default == TRAINING.max_vp


def test_estimate_without_a_layout_is_the_plain_layout_and_says_so(client):
    body = {"model": "llama3-8b", "gpu": "h100-sxm", "tp": 2, "dp": 4}
    d = client.post("/api/estimate/train", json=body).json()
    e = estimate_training(
        "llama3-8b",
        "h100-sxm",
        Layout(tp=2, dp=4),
        seq_len=TRAINING.seq_len,
        global_batch=TRAINING.global_batch,
        precision=TRAINING.precision,
    )
    assert d["result"]["step_time_s"] == pytest.approx(e.step_time_s, rel=1e-12)
    a = d["assumptions"]
    assert a["tp"] == {"value": 2, "default": False}
    for name, value in (("pp", 1), ("vp", 1), ("cp", 1), ("ep", 1), ("micro_batch", 1)):
        assert a[name] == {"value": value, "default": True}
    assert a["global_batch"] == {"value": TRAINING.global_batch, "default": True}
    assert a["seq_len"] == {"value": TRAINING.seq_len, "default": True}
    assert a["precision"] == {"value": TRAINING.precision, "default": True}


@pytest.mark.parametrize(
    ("path", "body", "stated"),
    [
        ("/api/estimate/train", {"model": "llama3-70b", "dp": 1}, {"global_batch", "seq_len", "precision"}),
        (
            "/api/estimate/infer",
            {"model": "llama3-8b", "curve": False},
            {"input_len", "output_len", "precision"},
        ),
        (
            "/api/search/train",
            {"model": "llama3-8b", "num_gpus": 8, "global_batch": 64},
            {"global_batch", "seq_len", "precision", "max_vp"},
        ),
        (
            "/api/compare",
            {"model": "llama3-8b", "gpus": ["b200"], "num_gpus": 64, "precision": "fp8"},
            {"global_batch", "seq_len", "precision", "tokens", "num_gpus"},
        ),
        (
            "/api/compare",
            {"kind": "serving", "model": "llama3-8b", "gpus": ["b200"]},
            {"input_len", "output_len", "precision", "min_tokens_per_s_per_user"},
        ),
    ],
)
def test_every_answer_states_its_assumptions(client, path, body, stated):
    r = client.post(path, json=body)
    assert r.status_code == 200, r.text
    a = r.json()["assumptions"]
    assert stated <= set(a)
    for name in stated:
        assert a[name]["default"] is (name not in body)
        if name in body:
            assert a[name]["value"] == body[name]
