"""Step boundaries of delayed scaling, across processes.

Call `update_scaling(model)` once per optimizer step (after backward). It all-reduces the step's
amaxes (slot 0 of every history) with MAX over the process group, so all ranks see the same history
and compute the same scales, then applies TE's update rule in every `QuantLinear` (Transformer Engine's
`DelayedScaling` with `reduce_amax=True`, defined in transformer_engine/common/recipe/__init__.py,
https://github.com/NVIDIA/TransformerEngine). Without torch.distributed initialised it only updates.
FSDP2 (`fully_shard`) unshards weights before forward, so each rank's weight amax is already global;
activations and gradients differ per rank, which is what the reduction is for.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from tenfold.engine.linear import QuantLinear


def quantized_layers(model: nn.Module) -> list[QuantLinear]:
    """Every QuantLinear in `model`, in module order."""
    return [m for m in model.modules() if isinstance(m, QuantLinear)]


def reduce_amax(model: nn.Module, group: dist.ProcessGroup | None = None) -> int:
    """All-reduce (MAX) the current-step amaxes of every delayed-scaling layer in one collective.

    Returns the number of layers reduced (0 when there is nothing to do or no process group)."""
    layers = [m for m in quantized_layers(model) if m.amax_history is not None and m.recipe.reduce_amax]
    if not layers or not (dist.is_available() and dist.is_initialized()):
        return 0
    if dist.get_world_size(group) == 1:
        return 0
    slot0 = torch.stack([m.amax_history[:, 0] for m in layers])
    dist.all_reduce(slot0, op=dist.ReduceOp.MAX, group=group)
    with torch.no_grad():
        for m, row in zip(layers, slot0, strict=True):
            m.amax_history[:, 0].copy_(row)
    return len(layers)


def update_scaling(model: nn.Module, group: dist.ProcessGroup | None = None) -> int:
    """End of a training step: reduce amaxes across ranks, then update every layer's scales.

    Returns the number of layers that use delayed scaling."""
    reduce_amax(model, group)
    n = 0
    for m in quantized_layers(model):
        if m.amax_history is not None:
            m.update_scaling()
            n += 1
    return n
