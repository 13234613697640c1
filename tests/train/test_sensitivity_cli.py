"""`tenfold train` saves weights.pt; `tenfold sensitivity RUN_DIR` ranks its layers and writes a policy."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from tenfold.cli.main import app
from tenfold.engine.autoprecision.policy import PrecisionPolicy
from tenfold.train import TrainConfig, Trainer, load_trained

runner = CliRunner()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sens")
    data = tmp / "data.txt"
    data.write_bytes(b"to be or not to be, that is the question. whether tis nobler in the mind " * 200)
    args = ["train", "--model", "tiny", "--seq-len", "32", "--steps", "20", "--batch-size", "4"]
    args += ["--data", str(data), "--out", str(tmp / "runs"), "--json", "--telemetry-every", "0"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["files"]["weights"].endswith("weights.pt")
    return tmp / "runs" / "bf16"


def test_saved_weights_rebuild_the_same_model(tmp_path):
    from tenfold.train import ByteDataset

    ds = ByteDataset.from_bytes(bytes(range(256)) * 40)
    cfg = TrainConfig(recipe="nvfp4", model="tiny", seq_len=32, steps=2, batch_size=4, eval_every=0)
    tr = Trainer(cfg, dataset=ds)
    tr.run()
    path = tr.save_weights(tmp_path / "weights.pt")
    cfg2, model = load_trained(tmp_path)
    assert cfg2 == cfg
    got = dict(model.named_parameters())
    for n, p in tr.model.named_parameters():
        assert torch.equal(got[n], p.detach()), n
    assert not any(type(m).__name__ == "QuantLinear" for m in model.modules())  # plain, unconverted
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a tenfold weights file"):
        load_trained(path)
    with pytest.raises(ValueError, match="not found"):
        load_trained(tmp_path / "elsewhere")


def test_sensitivity_command_ranks_layers_and_writes_a_policy(run_dir, tmp_path):
    pol = tmp_path / "p.toml"
    args = ["sensitivity", str(run_dir), "--batches", "2", "--fp4-fraction", "0.5", "--top", "0"]
    r = runner.invoke(app, [*args, "--policy-out", str(pol), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["candidates"] == ["nvfp4", "mxfp8"] and out["n_batches"] == 2
    assert len(out["rows"]) == 2 * 8  # tiny GPT: 2 blocks x 4 linears, each in two formats
    deltas = [row["delta"] for row in out["rows"]]
    assert deltas == sorted(deltas, reverse=True)
    p = PrecisionPolicy.load(pol)
    assert p.layers == out["policy"]["layers"] and len(p.layers) == 8
    assert p.fp4_flop_fraction(p.flops) >= 0.5
    # the loop closes: train under the policy
    r = runner.invoke(
        app,
        [
            "train",
            "--policy",
            str(pol),
            "--model",
            "tiny",
            "--seq-len",
            "32",
            "--steps",
            "1",
            "--batch-size",
            "2",
            "--out",
            str(tmp_path / "runs"),
            "--json",
            "--data",
            str(run_dir.parent.parent / "data.txt"),
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["sensitivity", str(run_dir), "--batches", "1", "--top", "3"])
    assert r.exit_code == 0, r.output
    assert "layers by loss increase (3 of 16 rows)" in " ".join(r.output.split())
    args = ["sensitivity", str(run_dir), "--batches", "1", "--score", "gradient", "--fp4-fraction", "0.5"]
    r = runner.invoke(app, [*args, "--policy-out", str(tmp_path / "g.toml"), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert all(row["grad_sqnr_db"] > 0 for row in out["rows"])
    assert PrecisionPolicy.load(tmp_path / "g.toml").fp4_flop_fraction(p.flops) >= 0.5


def test_training_score_ranks_blocks_reports_its_cost_and_writes_a_policy(run_dir, tmp_path):
    pol = tmp_path / "t.toml"
    args = ["sensitivity", str(run_dir), "--score", "training", "--probe-steps", "2", "--batches", "2"]
    r = runner.invoke(app, [*args, "--fp4-fraction", "0.5", "--policy-out", str(pol), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["score"] == "training" and out["probe_steps"] == 2
    assert out["optimizer_steps"] == 2 * (1 + 2 * 2)  # bf16 run + 2 blocks x 2 formats, 2 steps each
    assert {row["group"] for row in out["rows"]} == {"block 0", "block 1"} and len(out["rows"]) == 4
    assert all(len(row["layers"]) == 4 and row["se"] > 0 for row in out["rows"])
    deltas = [row["delta"] for row in out["rows"]]
    assert deltas == sorted(deltas, reverse=True)
    p = PrecisionPolicy.load(pol)
    assert p.fp4_flop_fraction(p.flops) >= 0.5
    # the block's increase is shared by its layers in proportion to their FLOPs
    from types import SimpleNamespace

    from tenfold.engine.autoprecision.training import block_deltas

    sens = SimpleNamespace(layers={"block 0": ("a", "b")}, delta={"block 0": {"nvfp4": 0.3}})
    got = block_deltas(sens, {"a": 1.0, "b": 2.0})
    assert got == {"a": {"nvfp4": pytest.approx(0.1)}, "b": {"nvfp4": pytest.approx(0.2)}}


def test_training_score_refuses_a_measurement_beyond_max_seconds(run_dir, tmp_path):
    args = ["sensitivity", str(run_dir), "--score", "training", "--probe-steps", "2", "--batches", "1"]
    r = runner.invoke(app, [*args, "--max-seconds", "0.001"], terminal_width=300)
    assert r.exit_code == 2 and "max_seconds" in r.output


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--score", "training", "--probe-steps", "0"], "probe-steps must be"),
        (["--score", "training", "--max-seconds", "-1"], "max-seconds must be"),
        (["--fp4-fraction", "0.5", "--max-loss-increase", "0.1"], "at most one"),
        (["--candidates", "nvfp4", "--fp4-fraction", "0.5"], "needs both"),
        (["--candidates", "fp3"], "unknown candidate"),
        (["--batches", "0"], "batches must be"),
        (["--score", "hessian"], "score must be"),
        (["--score", "gradient", "--max-loss-increase", "0.1"], "loss units"),
        (["--gpu", "z80"], "z80"),
    ],
)
def test_sensitivity_command_rejects_bad_input(run_dir, extra, message):
    r = runner.invoke(app, ["sensitivity", str(run_dir), *extra], terminal_width=300)
    assert r.exit_code == 2, r.output
    assert message in " ".join(r.output.replace("│", " ").split())


def test_sensitivity_command_needs_a_trained_run(tmp_path):
    r = runner.invoke(app, ["sensitivity", str(tmp_path)], terminal_width=300)
    assert r.exit_code == 2 and "weights.pt" in r.output


def test_sensitivity_table_fits_80_columns_without_cutting_a_number(run_dir):
    r = runner.invoke(app, ["sensitivity", str(run_dir), "--batches", "2"], terminal_width=80)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= 80 and "…" not in r.stdout
    assert "blocks.0.mlp.fc2" in r.stdout  # layer names whole
