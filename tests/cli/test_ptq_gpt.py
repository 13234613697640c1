"""`tenfold ptq` on a `tenfold train` run folder: the reference GPT, scored by validation loss."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from tenfold.cli.main import app
from tenfold.engine.ptq.policy import read_policy
from tenfold.train import ByteDataset, TrainConfig, Trainer
from tenfold.train.trainer import WEIGHTS_NAME

runner = CliRunner()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny GPT trained 12 steps on a small text file, saved as `tenfold train` saves it."""
    root = tmp_path_factory.mktemp("gpt")
    data = root / "data.txt"
    data.write_bytes(bytes(range(32, 127)) * 400 + b"to be or not to be, that is the question. " * 300)
    cfg = TrainConfig(model="tiny", seq_len=32, steps=12, batch_size=4, eval_every=0, data=str(data))
    tr = Trainer(cfg, dataset=ByteDataset.from_bytes(data.read_bytes()))
    tr.run()
    out = root / "run"
    out.mkdir()
    tr.save_weights(out / WEIGHTS_NAME)
    return out, tr.evaluate(16)


def _ptq(*args: str):
    return runner.invoke(app, ["ptq", *args, "--json"])


def test_uniform_nvfp4_reports_the_runs_own_validation_loss_and_perplexity(run_dir, tmp_path) -> None:
    run, val_loss = run_dir
    r = _ptq(str(run), "--out", str(tmp_path / "q"))
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    v = rep["validation"]
    assert v["loss_before"] == pytest.approx(val_loss, rel=1e-6)  # the trainer's first 16 batches
    assert v["perplexity_after"] == pytest.approx(math.exp(v["loss_after"]))
    assert v["loss_after"] != v["loss_before"] and v["batches"] == 16 and v["tokens"] == 16 * 4 * 32
    assert rep["mean_bits_per_weight"] == pytest.approx(4.5, abs=0.02)
    assert set(read_policy(tmp_path / "q" / "policy.toml").layers.values()) == {"nvfp4"}
    assert "validation loss on 16 batches" in (tmp_path / "q" / "report.md").read_text()


def test_auto_policy_for_a_gpt_keeps_the_budget_and_mixes_formats(run_dir, tmp_path) -> None:
    run, _ = run_dir
    r = _ptq(str(run), "--policy", "auto", "--bits", "6", "--weights-only", "--out", str(tmp_path / "a"))
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    pol = read_policy(tmp_path / "a" / "policy.toml")
    assert rep["mode"] == "weight-only" and rep["calibration_batches"] == 4
    assert pol.mean_bits <= 6.0 and len(set(pol.layers.values())) > 1
    assert "lm_head" not in pol.layers  # the LM head stays in high precision


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--policy", "auto", "--calib", "x.txt"], "--calib, --eval and --floor"),
        (["--policy", "auto", "--floor", "0.99"], "--calib, --eval and --floor"),
        (["--eval", "x.txt"], "--calib, --eval and --floor"),
    ],
)
def test_sentence_options_on_a_gpt_run_exit_2_and_write_nothing(run_dir, tmp_path, extra, needle) -> None:
    run, _ = run_dir
    out = tmp_path / "bad"
    r = _ptq(str(run), *extra, "--out", str(out))
    assert r.exit_code == 2 and needle in r.output and str(run) in r.output
    assert not out.exists()


def test_a_run_whose_training_text_is_gone_exits_2_naming_it(run_dir, tmp_path) -> None:
    import torch

    run, _ = run_dir
    blob = torch.load(run / WEIGHTS_NAME, weights_only=True)
    blob["config"]["data"] = str(tmp_path / "moved.txt")
    moved = tmp_path / "moved_run"
    moved.mkdir()
    torch.save(blob, moved / WEIGHTS_NAME)
    r = _ptq(str(moved), "--out", str(tmp_path / "q"))
    assert r.exit_code == 2 and "moved.txt" in r.output and "not there any more" in r.output
    assert not (tmp_path / "q").exists()


def test_the_folder_above_a_run_is_refused_with_the_run_named(run_dir, tmp_path) -> None:
    run, _ = run_dir
    r = _ptq(str(run.parent), "--out", str(tmp_path / "q"))
    assert r.exit_code == 2 and f"runs; give one: {run}" in " ".join(r.output.split())
    assert not (tmp_path / "q").exists()
