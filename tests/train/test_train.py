"""The reference trainer: embedded corpus, model, training loop, outputs and the `tenfold train` command."""

from __future__ import annotations

import json
import math

import pytest
import torch
from typer.testing import CliRunner

from tenfold.cli.main import app
from tenfold.train import GPT, MODEL_SIZES, ByteDataset, GPTConfig, TrainConfig, Trainer, stdlib_corpus
from tenfold.train.data import stdlib_files
from tenfold.train.trainer import COMPILE_MIN_STEPS, quant_path_for

SMALL = ByteDataset.from_bytes(bytes(range(256)) * 40 + b"hello world, " * 500)


def test_embedded_corpus_is_the_standard_library_in_a_fixed_order():
    files = stdlib_files()
    assert len(files) > 100 and all(p.suffix == ".py" for p in files)
    assert not any("site-packages" in p.parts for p in files)
    a = stdlib_corpus(1 << 20)
    assert len(a) == 1 << 20 and a == stdlib_corpus(1 << 20)
    assert a.startswith(files[0].read_bytes()[:1000])
    with pytest.raises(ValueError, match="max_bytes"):
        stdlib_corpus(0)


def test_batches_are_a_pure_function_of_seed_and_step():
    x1, y1 = SMALL.batch("train", 5, 4, 16, seed=1)
    x2, _ = SMALL.batch("train", 5, 4, 16, seed=1)
    assert torch.equal(x1, x2) and torch.equal(x1[:, 1:], y1[:, :-1])
    assert not torch.equal(x1, SMALL.batch("train", 6, 4, 16, seed=1)[0])
    v, _ = SMALL.batch("val", 0, 4, 16, seed=1)
    assert v.max() < 256 and v.dtype == torch.int64
    with pytest.raises(ValueError, match="split must be"):
        SMALL.part("test")


def test_gpt_is_causal_and_its_linears_have_the_names_convert_expects():
    cfg = GPTConfig(n_layers=2, d_model=32, n_heads=2, d_ff=64, seq_len=16)
    torch.manual_seed(0)
    m = GPT(cfg)
    idx = torch.randint(0, 256, (2, 16))
    out = m(idx)
    assert out.shape == (2, 16, 256)
    idx2 = idx.clone()
    idx2[:, 10] = (idx2[:, 10] + 1) % 256
    assert torch.equal(m(idx2)[:, :10], out[:, :10])  # the future does not leak into the past
    linears = {n for n, mod in m.named_modules() if isinstance(mod, torch.nn.Linear)}
    assert {"blocks.0.attn.qkv", "blocks.1.mlp.fc2", "lm_head"} <= linears
    n_params = sum(p.numel() for p in m.parameters())
    assert n_params == cfg.n_params
    with pytest.raises(ValueError, match="divisible"):
        GPTConfig(d_model=30, n_heads=4)
    assert set(MODEL_SIZES) == {"tiny", "small", "base"}


def test_training_reduces_the_loss_and_reports_it():
    cfg = TrainConfig(
        recipe="mxfp8",
        model="tiny",
        seq_len=32,
        steps=30,
        batch_size=8,
        eval_every=15,
        lr=3e-3,
        quant_backend="eager",
    )
    res = Trainer(cfg, dataset=SMALL).run()
    assert len(res.steps) == 30 and [e["step"] for e in res.evals] == [15, 30]
    assert res.steps[-1]["loss"] < res.steps[0]["loss"] - 1.0
    assert math.isfinite(res.final_val_loss) and res.tokens_per_s > 0
    assert res.summary()["converted_layers"] == 8
    assert res.steps[0]["lr"] < res.steps[cfg.warmup_steps]["lr"]


def test_config_validation():
    with pytest.raises(ValueError, match="unknown recipe"):
        TrainConfig(recipe="fp3")
    with pytest.raises(ValueError, match="unknown model size"):
        TrainConfig(model="huge")
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="divisible"):
        TrainConfig(d_model=102)


def test_cli_train_writes_metrics_plot_and_json(tmp_path):
    data = tmp_path / "data.txt"
    data.write_bytes(b"to be or not to be, that is the question. " * 300)
    args = ["train", "--recipe", "nvfp4", "--model", "tiny", "--seq-len", "32", "--steps", "4"]
    args += ["--batch-size", "4", "--eval-every", "2", "--data", str(data), "--out", str(tmp_path), "--json"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["recipe"] == "nvfp4" and summary["steps"] == 4
    run = tmp_path / "nvfp4"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and "val_loss" in rows[1]
    assert (run / "loss.html").read_text().startswith("<!doctype html>")
    assert json.loads((run / "summary.json").read_text())["final_val_loss"] == summary["final_val_loss"]


def test_cli_train_in_bf16_writes_its_run_though_nothing_is_quantized(tmp_path):
    args = ["train", "--recipe", "bf16", "--model", "tiny", "--seq-len", "32", "--steps", "3"]
    r = CliRunner().invoke(app, [*args, "--batch-size", "4", "--out", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    run = tmp_path / "bf16"
    assert (run / "telemetry.jsonl").read_text() == ""  # nothing quantized, so nothing recorded
    assert json.loads(r.stdout)["converted_layers"] == 0 and (run / "loss.html").is_file()


def test_cli_rejects_bad_input_with_exit_code_2(tmp_path):
    r = CliRunner().invoke(app, ["train", "--recipe", "fp3", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "unknown recipe" in r.output
    r = CliRunner().invoke(app, ["train", "--data", str(tmp_path / "missing.txt"), "--out", str(tmp_path)])
    assert r.exit_code == 2 and "does not exist" in r.output
    r = CliRunner().invoke(app, ["train", "--help"])
    assert r.exit_code == 0 and "Example: tenfold train" in r.output


def test_training_under_a_precision_policy_converts_each_layer_to_its_format(tmp_path):
    from tenfold.engine import QuantLinear
    from tenfold.engine.autoprecision.policy import PrecisionPolicy

    layers = {"blocks.0.attn.qkv": "nvfp4", "blocks.0.mlp.fc1": "mxfp8", "blocks.1.mlp.fc2": "bf16"}
    path = PrecisionPolicy(layers=layers).save(tmp_path / "mine.toml")
    cfg = TrainConfig(model="tiny", seq_len=32, steps=3, batch_size=4, eval_every=0, policy=str(path))
    assert cfg.label == "mine"
    tr = Trainer(cfg, dataset=SMALL)
    got = {n: m.recipe.name for n, m in tr.model.named_modules() if isinstance(m, QuantLinear)}
    assert got == {"blocks.0.attn.qkv": "nvfp4", "blocks.0.mlp.fc1": "mxfp8"}
    res = tr.run()
    assert math.isfinite(res.final_val_loss)
    assert res.summary()["recipe"] == "policy" and res.summary()["policy"] == str(path)
    with pytest.raises(ValueError, match="not found"):
        TrainConfig(policy=str(tmp_path / "missing.toml"))
    data = tmp_path / "data.txt"
    data.write_bytes(b"to be or not to be, that is the question. " * 300)
    args = ["train", "--policy", str(path), "--model", "tiny", "--seq-len", "32", "--steps", "2"]
    args += ["--batch-size", "4", "--data", str(data), "--out", str(tmp_path / "runs"), "--json"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["converted_layers"] == 2
    assert (tmp_path / "runs" / "mine" / "metrics.jsonl").is_file()
    bad = ["train", "--policy", str(tmp_path / "nope.toml"), "--out", str(tmp_path)]
    r = CliRunner().invoke(app, bad)
    assert r.exit_code == 2 and "not found" in " ".join(r.output.replace("│", " ").split())


def test_calibration_batches_are_training_text_no_run_trains_on():
    from tenfold.train.data import CALIBRATION_INDEX

    a = SMALL.calibration_batches(3, 4, 16, seed=0)
    assert len(a) == 3 and all(
        torch.equal(x, y) for (x, _), (y, _) in zip(a, SMALL.calibration_batches(3, 4, 16, 0), strict=True)
    )
    assert torch.equal(a[1][0], SMALL.batch("train", CALIBRATION_INDEX + 1, 4, 16, 0)[0])
    assert CALIBRATION_INDEX > 100_000  # far beyond the step index of any run the reference trainer makes


def test_throughput_leaves_out_the_compiling_warm_up_steps(monkeypatch):
    """A slow first step (what compilation does) must not set the reported tok/s."""
    import time

    cfg = TrainConfig(model="tiny", seq_len=32, steps=4, batch_size=4, eval_every=0, timing_warmup_steps=1)
    tr = Trainer(cfg, dataset=SMALL)
    step = tr.train_step

    def slow_first() -> dict:
        if tr.step == 0:
            time.sleep(2.0)
        return step()

    monkeypatch.setattr(tr, "train_step", slow_first)
    res = tr.run()
    # three timed steps of a tiny model take far less than the 2 s sleep of the excluded one
    assert res.tokens_per_s > 3 * cfg.tokens_per_step / 2.0
    assert res.summary()["throughput_warmup_steps_excluded"] == 1 == cfg.timed_from
    assert TrainConfig(steps=1).timed_from == 0  # a one-step run times its only step


def test_cli_refuses_an_earlier_run_folder_unless_overwrite(tmp_path):
    data = tmp_path / "data.txt"
    data.write_bytes(b"to be or not to be, that is the question. " * 300)
    args = ["train", "--model", "tiny", "--seq-len", "32", "--steps", "1", "--batch-size", "2"]
    args += ["--data", str(data), "--out", str(tmp_path / "runs"), "--telemetry-every", "0", "--json"]
    assert CliRunner().invoke(app, args).exit_code == 0
    run = tmp_path / "runs" / "bf16"
    (run / "policy.toml").write_text("[layers]\n")  # what `tenfold sensitivity` left beside the old weights
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "--overwrite" in r.output and "Traceback" not in r.output
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == before  # nothing written
    r = CliRunner().invoke(app, [*args, "--overwrite"])
    assert r.exit_code == 0, r.output
    assert not (run / "policy.toml").exists() and (run / "weights.pt").is_file()


@pytest.mark.parametrize(
    "quant_backend,steps,want",
    [("auto", 1, "eager"), ("auto", COMPILE_MIN_STEPS - 1, "eager"), ("auto", COMPILE_MIN_STEPS, "auto")]
    + [(b, 1, b) for b in ("eager", "compiled", "reference")],
)
def test_short_runs_quantize_eagerly_under_auto(quant_backend, steps, want):
    """`auto` skips the compile warm-up for runs too short to earn it back; explicit choices are kept."""
    cfg = TrainConfig(recipe="mxfp8", model="tiny", steps=steps, quant_backend=quant_backend)
    assert quant_path_for(cfg) == want
    trainer = Trainer(cfg, dataset=SMALL)
    layers = [m for m in trainer.model.modules() if hasattr(m, "quant_backend")]
    assert layers and {m.quant_backend for m in layers} == {want}


def test_a_policy_with_the_recipes_layout_trains_exactly_like_the_recipe(tmp_path):
    """A policy's recipes take the run's seed (stochastic-rounding noise), so a policy that repeats the
    nvfp4 recipe's layout (last block of 2 in bf16) is the same run, bit for bit, for every seed."""
    from tenfold.engine.autoprecision.policy import PrecisionPolicy

    names = [f"blocks.{i}.{k}" for i in range(2) for k in ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")]
    layers = {n: "nvfp4" if n.startswith("blocks.0.") else "bf16" for n in names}
    path = PrecisionPolicy(layers=layers).save(tmp_path / "same.toml")
    for seed in (3, 4):
        base = {"model": "tiny", "seq_len": 32, "steps": 4, "batch_size": 4, "eval_every": 0, "seed": seed}
        a = Trainer(TrainConfig(recipe="nvfp4", **base), dataset=SMALL)
        b = Trainer(TrainConfig(policy=str(path), **base), dataset=SMALL)
        a.run()
        b.run()
        assert a.evaluate(2) == b.evaluate(2)
