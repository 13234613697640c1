"""Scaling state lives in buffers: delayed scaling follows TE, and checkpoints resume bit-identically."""

from __future__ import annotations

import io

import pytest
import torch

from tenfold.engine import QuantLinear, recipe, update_scaling
from tenfold.formats import AmaxHistory
from tenfold.train import ByteDataset, TrainConfig, Trainer

CORPUS = ByteDataset.from_bytes(
    b"".join(
        f"line {i}: the quick brown fox {i * 7 % 13} jumps over the lazy dog.\n".encode() for i in range(400)
    )
)


def test_delayed_scaling_follows_the_amax_history_rules():
    torch.manual_seed(0)
    r = recipe("fp8_delayed", amax_history_len=4)
    layer = QuantLinear(32, 16, recipe=r)
    oracle = {t: AmaxHistory(length=4, fp8_max=m) for t, m in (("x", 448.0), ("w", 448.0), ("dy", 57344.0))}
    for step in range(6):
        x = torch.randn(8, 32) * (step + 1)
        dy = torch.randn(8, 16) * 10.0 ** (-step)
        for t, v in (("x", x), ("w", layer.weight)):
            oracle[t].observe(v.detach().abs().amax())
        oracle["dy"].observe(dy.abs().amax())
        layer(x).backward(dy)
        assert update_scaling(layer) == 1
        for h in oracle.values():
            h.update()
        for i, t in enumerate(("x", "w", "dy")):
            assert torch.equal(layer.amax_history[i], oracle[t].history)
            assert torch.equal(layer.scale[i], oracle[t].scale)
    assert layer.scale[0] != 1.0 and layer.scale[2] > layer.scale[0]


def test_buffers_are_in_the_state_dict_and_restore_the_plan():
    a = QuantLinear(64, 32, recipe=recipe("nvfp4"), seed=5)
    b = QuantLinear(64, 32, recipe=recipe("nvfp4"), seed=9)
    sd = a.state_dict()
    assert {"sr_seed", "sr_step", "hadamard_signs"} <= set(sd)
    assert b.plan != a.plan
    b.load_state_dict(sd)
    assert b.plan == a.plan and int(b.sr_seed) == 5
    d = QuantLinear(64, 32, recipe=recipe("fp8_delayed"))
    assert {"amax_history", "scale"} <= set(d.state_dict())
    assert d.state_dict()["amax_history"].shape == (3, 1024)


def trainer(name: str, steps: int = 6) -> Trainer:
    cfg = TrainConfig(
        recipe=name,
        model="tiny",
        seq_len=32,
        steps=steps,
        batch_size=4,
        warmup_steps=2,
        eval_every=0,
        eval_batches=1,
        quant_backend="eager",
        hp_last_blocks=0,
    )
    return Trainer(cfg, dataset=CORPUS)


def losses(t: Trainer, n: int) -> list[float]:
    return [t.train_step()["loss"] for _ in range(n)]


def roundtrip(state: dict) -> dict:
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


@pytest.mark.parametrize("name", ["fp8_delayed", "nvfp4"])
def test_resuming_mid_run_continues_the_exact_loss_trajectory(name):
    """fp8_delayed carries amax histories; nvfp4 carries stochastic-rounding streams and RHT signs."""
    straight = losses(trainer(name), 6)
    first = trainer(name)
    head = losses(first, 3)
    state = roundtrip(first.state_dict())
    resumed = trainer(name)
    resumed.load_state_dict(state)
    tail = losses(resumed, 3)
    assert head + tail == straight
    # control: the same checkpoint without the quantization state does not resume exactly
    stale = trainer(name)
    model_state = {
        k: v for k, v in state["model"].items() if not k.endswith(("amax_history", "scale", "sr_step"))
    }
    stale.model.load_state_dict(model_state, strict=False)
    stale.optimizer.load_state_dict(state["optimizer"])
    stale.step = state["step"]
    assert losses(stale, 3) != tail


def test_load_rejects_a_checkpoint_of_another_configuration():
    state = trainer("mxfp8").state_dict()
    with pytest.raises(ValueError, match="different configuration"):
        trainer("nvfp4").load_state_dict(state)
