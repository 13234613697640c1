"""A Hugging Face Llama built from config, trained by the reference trainer under a recipe."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from tenfold.train import ByteDataset, TrainConfig, Trainer, stdlib_corpus
from tenfold.train.hf import llama

SHAPE = {"n_layers": 4, "d_model": 32, "n_heads": 2, "d_ff": 64, "seq_len": 16}


def _trainer(seed: int, recipe: str = "nvfp4", steps: int = 4) -> Trainer:
    cfg = TrainConfig(
        recipe=recipe, steps=steps, batch_size=4, seq_len=16, warmup_steps=0, eval_every=0, seed=seed
    )
    data = ByteDataset.from_bytes(stdlib_corpus(200_000))
    return Trainer(cfg, dataset=data, model=lambda: llama(**SHAPE))


def test_llama_is_causal_and_maps_ids_to_byte_logits():
    torch.manual_seed(0)
    m = llama(**SHAPE)
    x = torch.randint(0, 256, (2, 16))
    y = m(x)
    assert y.shape == (2, 16, 256)
    x2 = x.clone()
    x2[:, 10:] = (x2[:, 10:] + 1) % 256  # later tokens must not change earlier logits
    assert torch.equal(m(x2)[:, :10], y[:, :10])
    assert not torch.equal(m(x2)[:, 10:], y[:, 10:])


def test_trainer_builds_the_model_after_seeding_and_the_recipe_keeps_the_llama_tail():
    a, b, c = _trainer(0), _trainer(0), _trainer(1)
    wa, wb, wc = (t.model.lm.model.layers[0].mlp.up_proj.weight for t in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    rep = a.conversion
    assert rep.n_blocks == 4 and rep.hp_blocks == (3,)  # ceil(0.125 x 4) = 1 block
    converted = {d.name for d in rep.converted}
    assert len(converted) == 3 * 7 and all(".layers.3." not in n for n in converted)
    assert "lm.lm_head" in {d.name for d in rep.kept}


def test_llama_trains_under_nvfp4_and_its_loss_falls():
    tr = _trainer(0, steps=12)
    first = tr.evaluate(2)
    res = tr.run()
    assert res.final_val_loss < first - 0.1
