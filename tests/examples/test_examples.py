"""The Hugging Face examples run end to end for a few steps (in a subprocess, as a user runs them)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the examples need the hf extra (transformers)")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SMALL = ["--steps", "2", "--layers", "2", "--recipes", "bf16,mxfp8"]
LOSS_LINE = r"{label}mxfp8\s+train loss (\d+\.\d+)\s+val loss (\d+\.\d+)\s+gap to bf16 [+-]\d+\.\d+ %"


def run_example(script: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def load_hf_train():
    spec = importlib.util.spec_from_file_location("hf_train", EXAMPLES / "hf_train.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_hf_train_prints_a_loss_per_recipe():
    res = run_example("hf_train.py", *SMALL)
    assert res.returncode == 0, res.stderr[-2000:]
    m = re.search(LOSS_LINE.format(label=""), res.stdout)
    assert m, res.stdout
    assert 0.0 < float(m.group(1)) < 6.0  # bytes: ln 256 = 5.55 at initialisation
    assert "recipe mxfp8: 14 layers converted, 1 kept in high precision" in res.stdout
    assert re.search(r"bf16\s+train loss \d+\.\d+\s+val loss \d+\.\d+\n", res.stdout)


def test_hf_train_rejects_bad_options_naming_the_choices(capsys):
    hf = load_hf_train()
    for argv, needle in (
        (["--recipes", "fp3"], "valid: bf16"),
        (["--model", "gpt5"], "valid: llama, qwen3, qwen3_moe"),
        (["--quant-backend", "fast"], "valid: auto"),
        (["--steps", "0"], "--steps must be >= 1"),
    ):
        with pytest.raises(SystemExit) as exc:
            hf.parse_args(argv)
        assert exc.value.code == 2
        assert needle in capsys.readouterr().err
    args = hf.parse_args(["--recipes", "nvfp4,bf16"])
    assert args.recipes == ["bf16", "nvfp4"]  # bf16 first: the gaps are measured against it


def test_hf_models_build_from_a_config_with_the_same_init():
    hf = load_hf_train()
    a = hf.build_model("qwen3", seed=3, d_model=64, n_layers=1)
    b = hf.build_model("qwen3", seed=3, d_model=64, n_layers=1)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(sa[k].equal(sb[k]) for k in sa)
    assert a.config.vocab_size == 256
    with pytest.raises(ValueError, match="valid: llama"):
        hf.build_model("gpt2", seed=0)


@pytest.mark.slow
def test_hf_train_fsdp_matches_the_single_process_run():
    res = run_example("hf_train_fsdp.py", *SMALL)
    assert res.returncode == 0, res.stderr[-2000:]
    assert re.search(LOSS_LINE.format(label="fsdp "), res.stdout), res.stdout
    diffs = dict(re.findall(r"^(\w+)\s+final loss fsdp .* \(relative (\S+)\)$", res.stdout, re.M))
    assert set(diffs) == {"bf16", "mxfp8"}, res.stdout
    assert float(diffs["bf16"]) < 1e-5  # the same math, only the order of fp32 sums differs
    assert float(diffs["mxfp8"]) < 1e-3  # per-block scales do not see the batch split
