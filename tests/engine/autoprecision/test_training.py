"""Training-aware sensitivity and the greedy repair on the tiny reference GPT (2 blocks)."""

from __future__ import annotations

import copy

import pytest
import torch

from tenfold.engine import ConversionPolicy
from tenfold.engine.autoprecision.training import greedy_repair, train_sensitivity
from tenfold.train import GPT, MODEL_SIZES

POLICY = ConversionPolicy(quant_backend="eager")


def batches(n: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        t = torch.randint(0, 256, (4, 33), generator=g)
        out.append((t[:, :-1], t[:, 1:]))
    return out


def opt(params) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=3e-3)


@pytest.fixture(scope="module")
def model() -> GPT:
    torch.manual_seed(0)
    return GPT(MODEL_SIZES["tiny"])


def test_scores_per_block_with_a_high_precision_control(model: GPT) -> None:
    before = copy.deepcopy(model.state_dict())
    seen = []
    s = train_sensitivity(
        model,
        opt,
        batches(3, 0),
        batches(2, 1),
        ("nvfp4_no_hp_layers", "bf16"),
        policy=POLICY,
        progress=lambda d, t: seen.append((d, t)),
    )
    assert sorted(s.layers) == ["block 0", "block 1"]
    assert all(len(v) == 4 for v in s.layers.values())  # qkv, proj, fc1, fc2
    assert seen[-1] == (4, 4) and s.optimizer_steps == 3 * 5
    for g in s.layers:
        # bf16 quantizes nothing: the same run as high precision, to the bit
        assert s.delta[g]["bf16"] == 0.0 and s.update_cosine[g]["bf16"] == pytest.approx(1.0)
        assert s.delta_se[g]["bf16"] == 0.0  # identical per-batch losses
        assert s.delta[g]["nvfp4_no_hp_layers"] != 0.0
        assert s.delta_se[g]["nvfp4_no_hp_layers"] > 0.0
        assert 0.0 < s.update_cosine[g]["nvfp4_no_hp_layers"] < 1.0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_cost_bound_and_bad_input(model: GPT) -> None:
    with pytest.raises(ValueError, match="max_seconds"):
        train_sensitivity(model, opt, batches(2, 0), batches(1, 1), policy=POLICY, max_seconds=1e-6)
    with pytest.raises(ValueError, match="recipe names"):
        train_sensitivity(model, opt, batches(1, 0), batches(1, 1), ("fp3",))
    with pytest.raises(ValueError, match="by must be"):
        train_sensitivity(model, opt, batches(1, 0), batches(1, 1), by="head")


def test_greedy_repair_keeps_the_fp4_share_and_only_keeps_improvements(model: GPT) -> None:
    train, evaluate = batches(3, 0), batches(2, 1)
    s = train_sensitivity(model, opt, train, evaluate, ("nvfp4_no_hp_layers",), policy=POLICY)
    worst = max(s.delta, key=lambda g: s.delta[g]["nvfp4_no_hp_layers"])
    final, trials = greedy_repair(model, opt, train, evaluate, s, [worst], policy=POLICY)
    assert len(final) == 1
    assert trials and trials[0]["out"] == worst  # the joint run is always tried once
    for t in trials:
        assert t["kept"] == (t["loss_after"] < t["loss_before"])
    assert all(t["kept"] for t in trials[:-1])  # it stops at the first swap that does not help
    kept = [t for t in trials if t["kept"]]
    assert final == ((kept[-1]["in"],) if kept else (worst,))
    with pytest.raises(ValueError, match="unknown groups"):
        greedy_repair(model, opt, train, evaluate, s, ["block 9"])
