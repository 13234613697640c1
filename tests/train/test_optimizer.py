"""The trainer's AdamW (`tenfold.train.trainer.adamw`), which `tenfold sensitivity --score training` shares:
weight decay on matrices only."""

import pytest
import torch
from torch import nn

from tenfold.train.trainer import adamw


def test_weight_decay_falls_on_matrices_only():
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2))
    opt = adamw(model.parameters(), lr=1e-3, weight_decay=0.1)
    decay, none = opt.param_groups
    assert decay["weight_decay"] == pytest.approx(0.1) and none["weight_decay"] == 0.0
    assert {p.ndim for p in decay["params"]} == {2}
    assert {p.ndim for p in none["params"]} == {1}
    assert len(decay["params"]) + len(none["params"]) == len(list(model.parameters()))
    assert decay["betas"] == (0.9, 0.95)


def test_a_norm_gain_is_not_decayed():
    gain = nn.Parameter(torch.ones(3))
    weight = nn.Parameter(torch.ones(3, 3))
    opt = adamw([gain, weight], lr=0.1, weight_decay=0.5)
    (gain.sum() * 0 + weight.sum() * 0).backward()  # zero gradients: only decay can move a value
    opt.step()
    assert torch.equal(gain.detach(), torch.ones(3))
    assert torch.all(weight.detach() < 1.0)
