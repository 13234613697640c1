"""Per-layer PTQ sensitivity: the output error when one linear layer alone is quantized in a scheme.

For each layer the policy would quantize and each candidate scheme, the layer is swapped for its
`InferenceLinear` in place, `run(model)` computes the outputs on calibration inputs, and the damage is
the relative squared error against the high-precision outputs, ||y_q - y||^2 / ||y||^2; then the layer is
put back. Squared output error is, to first order, additive over layers whose errors are independent,
which is what the knapsack of `tenfold.engine.ptq.policy` assumes. For unit-norm sentence embeddings it
is 2 (1 - cosine) averaged over sentences, i.e. the cosine agreement the evaluation reports.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch
from torch import nn

from tenfold.engine.convert import ConversionPolicy, replace_module
from tenfold.engine.ptq.policy import CANDIDATES, LayerCost, bits_per_weight
from tenfold.engine.ptq.quantize import quantize_for_inference


def relative_error(reference: torch.Tensor, outputs: torch.Tensor) -> float:
    """||outputs - reference||^2 / ||reference||^2 (0 for identical outputs)."""
    ref = reference.float()
    den = ref.square().sum().item()
    return (outputs.float() - ref).square().sum().item() / den if den else 0.0


@torch.no_grad()
def ptq_sensitivity(
    model: nn.Module,
    run: Callable[[nn.Module], torch.Tensor],
    candidates: Sequence[str] = CANDIDATES,
    *,
    activations: bool = True,
    policy: ConversionPolicy | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[LayerCost]:
    """One `LayerCost` per linear layer `policy` would quantize: its size, bits and measured damage per
    candidate. `model` is left as it was. `progress(done, total)` is called after each measurement."""
    if not candidates:
        raise ValueError("no candidate schemes")
    pol = policy or ConversionPolicy()
    probe = quantize_for_inference(copy.deepcopy(model), candidates[0], activations=activations, policy=pol)
    layers = [d for d in probe.layers if d.quantized]
    reference = run(model)
    total, done = len(layers) * len(candidates), 0
    out = []
    for d in layers:
        original = model.get_submodule(d.name)
        only = replace(pol, include=(f"^{re.escape(d.name)}$",), hp_first_blocks=0, hp_last_blocks=0)
        damage = {}
        for name in candidates:
            try:
                quantize_for_inference(model, name, activations=activations, policy=only)
                damage[name] = relative_error(reference, run(model))
            finally:
                replace_module(model, d.name, original)
            done += 1
            if progress is not None:
                progress(done, total)
        bits = {name: bits_per_weight(name, d.out_features, d.in_features) for name in candidates}
        out.append(LayerCost(name=d.name, numel=d.weight_numel, bits=bits, damage=damage))
    return out
