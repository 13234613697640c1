"""benchmarks/gpu_check.py: its bit-identity comparison on CPU paths, and the whole check on a CUDA GPU."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from tenfold.engine import RECIPE_NAMES

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod  # dataclasses look their module up while the script executes
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop("gpu_check", None)


def test_every_recipe_is_bit_identical_between_cpu_eager_and_reference(gpu_check):
    rows = gpu_check.compare_paths(RECIPE_NAMES, ("cpu", "eager"))
    assert [a.recipe for a in rows] == list(RECIPE_NAMES)
    bad = [a.line() for a in rows if not a.ok(strict=True)]  # one BLAS: the outputs are identical too
    assert not bad, bad
    assert all(a.max_bound_ratio == 0.0 for a in rows)


def test_the_comparison_catches_a_one_ulp_operand_difference(gpu_check, monkeypatch):
    real = gpu_check.gemm_operands

    def off_by_one_ulp(name, device, quant_backend, **kw):
        out = real(name, device, quant_backend, **kw)
        if quant_backend == "eager":
            t = out["dgrad_b"].clone()
            t[3, 5] = torch.nextafter(t[3, 5], torch.tensor(float("inf")))
            out["dgrad_b"] = t
        return out

    monkeypatch.setattr(gpu_check, "gemm_operands", off_by_one_ulp)
    (a,) = gpu_check.compare_paths(["mxfp8"], ("cpu", "eager"))
    assert a.operands_mismatched == ("dgrad_b",) and not a.ok()
    assert "operands MISMATCH in dgrad_b" in a.line()


def test_outputs_are_held_to_the_fp32_accumulation_bound(gpu_check, monkeypatch):
    """An output a few ulps off passes the bound (summation order) but not --strict; a large error fails."""
    real = gpu_check.layer_outputs

    def perturbed(eps):
        def fn(name, device, quant_backend, **kw):
            out = real(name, device, quant_backend, **kw)
            if quant_backend == "eager":
                out["dw"] = out["dw"] * (1 + eps)
            return out

        return fn

    monkeypatch.setattr(gpu_check, "layer_outputs", perturbed(2**-23))
    (a,) = gpu_check.compare_paths(["nvfp4"], ("cpu", "eager"))
    assert a.outputs_mismatched == ("dw",) and not a.outputs_beyond_bound
    assert a.ok() and not a.ok(strict=True) and 0 < a.max_bound_ratio < 1
    monkeypatch.setattr(gpu_check, "layer_outputs", perturbed(1e-3))
    (a,) = gpu_check.compare_paths(["nvfp4"], ("cpu", "eager"))
    assert a.outputs_beyond_bound == ("dw",) and not a.ok()
    assert "BEYOND the fp32 bound in dw" in a.line()


def test_layer_outputs_are_fixed_and_quantized(gpu_check):
    a = gpu_check.layer_outputs("nvfp4", "cpu", "eager")
    b = gpu_check.layer_outputs("nvfp4", "cpu", "eager")
    plain = gpu_check.layer_outputs("bf16", "cpu", "eager")
    assert all(torch.equal(a[t], b[t]) for t in gpu_check.TENSORS)
    assert not torch.equal(a["y"], plain["y"])  # the recipe changed the numbers


def test_native_fp8_agreement_on_cpu_kernels(gpu_check):
    """torch's CPU `_scaled_mm` runs the per-tensor and row-wise pairings: part (c)'s agreement code."""
    names = gpu_check.native_recipes("cpu", 256, 128)
    assert {"fp8_current", "fp8_rowwise"} <= set(names) and "mxfp8" not in names
    assert gpu_check.native_agreement("fp8_current", "cpu") < 1e-5


def test_cpu_run_of_the_script(gpu_check, capsys):
    argv = "--device cpu --recipes mxfp8,fp8_delayed --train-recipes mxfp8 --quant-backend eager"
    code = gpu_check.main([*argv.split(), "--steps", "1", "--warmup", "0"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "cpu/eager vs cpu/reference  operands bit-identical; outputs bit-identical" in out
    assert "outputs bit-identical in 2 of 2" in out and "x bf16" in out and "summary: OK" in out
    with pytest.raises(SystemExit):
        gpu_check.main(["--device", "cpu", "--paths", "fast"])
    assert "valid: auto, reference, eager, compiled" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message printed where CUDA is absent")
def test_without_cuda_nothing_to_check(gpu_check, capsys):
    assert gpu_check.main([]) == 0
    assert capsys.readouterr().out.strip() == "no CUDA device: nothing to check"


@pytest.mark.gpu
def test_gpu_emulation_is_bit_identical_to_the_cpu(gpu_check, capsys):
    argv = "--train-recipes mxfp8,nvfp4 --quant-backend eager --steps 2 --warmup 1"
    code = gpu_check.main(argv.split())
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"operands bit-identical in {len(RECIPE_NAMES)} of {len(RECIPE_NAMES)}" in out
