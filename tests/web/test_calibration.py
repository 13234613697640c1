"""The web API's optional `calibration` (issue 15, part 3): a user calibration's tables change the training
answers; a bad one is a 422 naming the field."""

import copy
import tomllib

import pytest

from tenfold.perf.specs.catalog import data_dir

PLAN = {"model": "llama3-70b", "gpu": "h100-sxm", "tp": 8, "pp": 4, "dp": 2, "precision": "fp8"}


@pytest.fixture(scope="module")
def slow():
    """The shipped calibration with every Hopper GEMM efficiency lowered by a fifth (still in bounds)."""
    with (data_dir("calibration") / "training.toml").open("rb") as fh:
        d = tomllib.load(fh)
    for k in ("hopper/16", "hopper/8"):
        d["gemm_efficiency"][k] *= 0.8
    return d


def test_a_calibration_changes_each_training_answer(client, slow):
    for path, body, rate in (
        ("/api/estimate/train", PLAN, lambda r: r["tokens_per_s_per_gpu"]),
        (
            "/api/search/train",
            {"model": "llama3-8b", "num_gpus": 8, "precision": "fp8"},
            lambda r: r["top"][0]["tokens_per_s_per_gpu"],
        ),
        (
            "/api/compare",
            {"model": "llama3-8b", "gpus": ["h100-sxm"], "num_gpus": 16, "precision": "fp8"},
            lambda r: r["rows"][0]["tokens_per_s_per_gpu"],
        ),
    ):
        plain = client.post(path, json=body)
        mine = client.post(path, json=body | {"calibration": slow})
        assert plain.status_code == mine.status_code == 200, mine.text
        assert rate(mine.json()["result"]) < rate(plain.json()["result"])
        stated = mine.json()["assumptions"]["calibration"]
        assert stated["default"] is False and stated["value"] == slow


@pytest.mark.parametrize(
    ("spoil", "named"),
    [
        (lambda d: d["parameters"].update(hbm_efficiency=1.5), "hbm_efficiency"),
        (lambda d: d["parameters"].pop("scaleout_efficiency"), "scaleout_efficiency"),
        (lambda d: d["gemm_efficiency"].update({"hopper/8": "fast"}), "hopper/8"),
        (lambda d: d.pop("gemm_efficiency"), "gemm_efficiency"),
        (lambda d: d.update(extra={}), "extra"),
    ],
)
def test_a_bad_calibration_is_a_422_naming_it(client, slow, spoil, named):
    bad = copy.deepcopy(slow)
    spoil(bad)
    r = client.post("/api/estimate/train", json=PLAN | {"calibration": bad})
    assert r.status_code == 422, r.text
    msg = r.json()["message"]
    assert msg.startswith("calibration") and named in msg


def test_a_serving_comparison_refuses_a_calibration(client, slow):
    r = client.post("/api/compare", json={"kind": "serving", "model": "llama3-8b", "calibration": slow})
    assert r.status_code == 422 and "calibration" in r.json()["message"]
