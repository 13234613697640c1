"""The compiled fast path of fake_quantize, bit-exact to the plain reference; CPU vs GPU parity."""

from __future__ import annotations

import pytest
import torch

from tenfold.formats import fake, fake_quantize, scheme
from tenfold.formats.compiled import compiled_copy

from .helpers import same_values

CASES = [
    ("mxfp8_e4m3", {"scale_mode": "rceil"}),
    ("mxfp4", {}),
    ("nvfp4", {"hadamard": True, "rounding": "stochastic", "seed": 9}),
    ("nvfp4_2d", {}),
    ("fp8_e4m3_tensor", {}),
]


def adversarial(rows: int, cols: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, cols, generator=g) * torch.exp2(
        torch.randint(-20, 20, (rows, 1), generator=g).float()
    )
    x[0, :40] = 0
    x[1, 3] = 1e30
    x[2, 5] = 2.0**-140
    return x


@pytest.mark.parametrize("name,opts", CASES, ids=[c[0] for c in CASES])
def test_compiled_matches_reference(name, opts):
    s = scheme(name, **opts)
    for shape in ((256, 512), (300, 333)):  # the second shape needs padding and exercises dynamic shapes
        x = adversarial(*shape)
        ref = fake_quantize(x, s, backend="reference", offset=3)
        fast = fake_quantize(x, s, backend="compiled", offset=3)
        assert same_values(ref, fast), name
    xb = adversarial(256, 512).to(torch.bfloat16)
    assert same_values(fake_quantize(xb, s, backend="reference"), fake_quantize(xb, s, backend="compiled"))


@pytest.mark.parametrize("nonfinite", ["nan", "satfinite"])
@pytest.mark.parametrize("special", [float("inf"), float("-inf"), float("nan")])
def test_nvfp4_two_stage_path_keeps_nonfinite_rules(nonfinite, special):
    """NVFP4 compiles in two stages, taking the tensor amax from the block amaxes: an Inf or NaN must
    give the reference's values under both policies (satfinite takes the finite tensor amax apart)."""
    s = scheme("nvfp4", nonfinite=nonfinite)
    x = adversarial(64, 80)
    x[3, 17] = special
    ref = fake_quantize(x, s, backend="reference")
    assert same_values(ref, fake_quantize(x, s, backend="compiled"))
    if nonfinite == "satfinite" and special != special:  # NaN: every value NaN under both policies
        assert torch.isnan(ref).all()
    elif nonfinite == "satfinite":  # the Inf saturates, the other values stay finite
        assert torch.isfinite(ref).all()


def test_auto_backend_picks_compiled_only_for_large_tensors(monkeypatch):
    calls = []
    monkeypatch.setattr(fake, "_run_compiled", lambda x, s, scale, offset: calls.append(x.numel()) or x)
    s = scheme("mxfp4")
    fake_quantize(torch.randn(8, 32), s)
    fake_quantize(torch.randn(fake.COMPILE_MIN_NUMEL // 32, 32), s)
    assert calls == [fake.COMPILE_MIN_NUMEL]


def test_compile_failure_falls_back_to_eager_with_a_warning(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no compiler here")

    s = scheme("mxfp8_e5m2", scale_mode="even")
    monkeypatch.setattr(torch, "compile", broken)
    compiled_copy.cache_clear()
    x = torch.randn(64, 64)
    with pytest.warns(UserWarning, match="torch.compile failed"):
        y = fake_quantize(x, s, backend="compiled")
    assert same_values(y, fake_quantize(x, s, backend="reference"))
    fake._COMPILE_FAILED.discard(s)
    compiled_copy.cache_clear()


@pytest.mark.gpu
@pytest.mark.parametrize("name,opts", CASES, ids=[c[0] for c in CASES])
def test_cpu_and_gpu_bit_identical(name, opts):
    s = scheme(name, **opts)
    x = adversarial(256, 512)
    cpu = fake_quantize(x, s, backend="reference")
    for backend in ("reference", "eager", "compiled"):
        assert same_values(cpu, fake_quantize(x.cuda(), s, backend=backend).cpu()), backend


def test_many_shapes_each_get_a_compiled_kernel():
    """More (scheme, shape) keys than dynamo's recompile limit must all compile, none fall back to eager.
    The limit is lowered to 1 for the test, so that four keys exceed it (at the default, 8, eleven keys
    took a minute of compiling)."""
    from torch._dynamo.utils import counters

    s = scheme("nvfp4", rounding="stochastic", seed=1)
    with torch._dynamo.config.patch(recompile_limit=1):
        n_keys = torch._dynamo.config.recompile_limit + 3
        before = counters["frames"]["ok"]
        for i in range(n_keys):
            x = adversarial(32 + 16 * i, 48)
            got = fake_quantize(x, s, backend="compiled")
            assert same_values(got, fake_quantize(x, s, backend="reference"))
    per_key = 2 if fake._two_stage(s) else 1  # NVFP4 compiles two functions per key
    assert counters["frames"]["ok"] - before == per_key * n_keys
