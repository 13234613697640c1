"""Mixed-precision PTQ: the knapsack against brute force, the policy file, per-layer quantization and the
sensitivity measurement."""

from __future__ import annotations

import copy
import itertools
import random

import pytest
import torch
from torch import nn

from tenfold.engine import quantize_for_inference
from tenfold.engine.ptq.policy import (
    LayerCost,
    bits_per_weight,
    cheapest_policy,
    choose_policy,
    mean_bits,
    read_policy,
)
from tenfold.engine.ptq.sensitivity import ptq_sensitivity, relative_error

BITS = {"nvfp4": 4.5, "mxfp4": 4.25, "mxfp8_e4m3": 8.25}


def random_layers(seed: int, n: int = 5) -> list[LayerCost]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        numel = rng.choice([1024, 4096, 16384])
        d8 = rng.uniform(0.0, 0.01)
        d4 = d8 + rng.uniform(0.0, 1.0)
        out.append(
            LayerCost(
                name=f"l{i}",
                numel=numel,
                bits=dict(BITS),
                damage={"mxfp8_e4m3": d8, "nvfp4": d4, "mxfp4": d4 * rng.uniform(1.0, 2.0)},
            )
        )
    return out


def brute_force(layers: list[LayerCost], budget: float) -> float:
    best = float("inf")
    for combo in itertools.product(BITS, repeat=len(layers)):
        choice = {c.name: k for c, k in zip(layers, combo, strict=True)}
        if mean_bits(layers, choice) <= budget + 1e-12:
            best = min(best, sum(c.damage[choice[c.name]] for c in layers))
    return best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("budget", [4.25, 4.5, 5.0, 6.3, 8.25])
def test_knapsack_is_optimal_and_within_budget(seed: int, budget: float) -> None:
    layers = random_layers(seed)
    p = choose_policy(layers, budget, activations=True)
    assert p.mean_bits <= budget + 1e-12
    assert p.predicted_damage == pytest.approx(brute_force(layers, budget), rel=1e-12, abs=1e-15)


def test_budget_below_the_cheapest_is_refused() -> None:
    with pytest.raises(ValueError, match="below the cheapest"):
        choose_policy(random_layers(0), 4.0, activations=True)


def test_cheapest_policy_meets_the_floor_with_fewest_bits() -> None:
    layers = random_layers(3)
    target = choose_policy(layers, 6.0, activations=False).predicted_damage
    p = cheapest_policy(layers, target, activations=False)
    assert p.predicted_damage <= target and p.mean_bits <= 6.0 + 1e-9
    with pytest.raises(ValueError, match="no policy"):
        cheapest_policy(layers, -1.0, activations=False)


def test_policy_toml_round_trip(tmp_path) -> None:
    p = choose_policy(random_layers(1), 5.0, activations=True)
    path = tmp_path / "policy.toml"
    path.write_text(p.to_toml())
    q = read_policy(path)
    assert q.layers == p.layers and q.activations and q.mean_bits == pytest.approx(p.mean_bits)
    path.write_text("[layers]\n")
    with pytest.raises(ValueError, match="not a tenfold PTQ policy"):
        read_policy(path)


def test_bits_per_weight_counts_the_scales() -> None:
    assert bits_per_weight("mxfp4", 64, 256) == 4.25  # 4 bits + an 8-bit scale per 32
    assert bits_per_weight("mxfp8_e4m3", 64, 256) == 8.25
    assert bits_per_weight("nvfp4", 64, 256) == pytest.approx(4.5, abs=0.01)  # + one fp32 tensor scale
    assert bits_per_weight("fp8_e4m3_row", 64, 256) == 8 + 32 / 256  # an fp32 scale per row


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64), nn.GELU(), nn.Linear(64, 32))


def test_layer_schemes_equal_to_one_scheme_give_the_uniform_model() -> None:
    x = torch.randn(16, 64)
    a, b = mlp(), mlp()
    quantize_for_inference(a, "nvfp4")
    rep = quantize_for_inference(b, "mxfp4", layer_schemes={n: "nvfp4" for n in ("0", "2", "4")})
    assert torch.equal(a(x), b(x))
    assert rep.scheme == "nvfp4"


def test_mixed_layer_schemes_and_kept_layers() -> None:
    m = mlp()
    rep = quantize_for_inference(m, "nvfp4", layer_schemes={"0": "mxfp8_e4m3", "2": None})
    by = {d.name: d for d in rep.layers}
    assert by["0"].scheme == "mxfp8_e4m3" and by["4"].scheme == "nvfp4"
    assert not by["2"].quantized and "layer policy" in by["2"].reason
    assert isinstance(m[2], nn.Linear) and rep.scheme == "mixed"


def test_sensitivity_leaves_the_model_and_ranks_formats() -> None:
    m = mlp()
    before = copy.deepcopy(m.state_dict())
    x = torch.randn(32, 64)
    seen = []
    costs = ptq_sensitivity(
        m, lambda mod: mod(x), ("mxfp4", "mxfp8_e4m3"), progress=lambda d, t: seen.append((d, t))
    )
    assert [c.name for c in costs] == ["0", "2", "4"]
    assert seen[-1] == (6, 6)
    assert all(isinstance(mod, nn.Linear | nn.GELU) for mod in m)
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    for c in costs:
        assert 0 < c.damage["mxfp8_e4m3"] < c.damage["mxfp4"]


def test_sensitivity_finds_the_one_layer_that_loses_information() -> None:
    """Layers 0 and 4 hold weights NVFP4 stores (almost) exactly (E2M1 values x 1/16, every 16-block
    reaching the tensor's amax), so only layer 2, with Gaussian weights, has a real weight-only error."""
    m = mlp()
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    with torch.no_grad():
        for i in (0, 4):
            w = m[i].weight
            g = torch.Generator().manual_seed(i)
            v = grid[torch.randint(0, 8, w.shape, generator=g)] * torch.sign(
                torch.randn(w.shape, generator=g)
            )
            v[:, ::16] = 6.0
            w.copy_(v / 16)
    x = torch.randn(32, 64)
    costs = ptq_sensitivity(m, lambda mod: mod(x), ("nvfp4",), activations=False)
    d = {c.name: c.damage["nvfp4"] for c in costs}
    assert d["2"] > 1e3 * max(d["0"], d["4"]), d


def test_relative_error() -> None:
    y = torch.tensor([3.0, 4.0])
    assert relative_error(y, y) == 0.0
    assert relative_error(y, torch.zeros(2)) == pytest.approx(1.0)
