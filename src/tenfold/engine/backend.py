"""Choosing how a quantized linear layer multiplies: `emulated` everywhere, `native` where tensor cores can.

`select_backend` is called explicitly (by `QuantLinear` and `convert`) with the device the layer lives
on; nothing is probed at import time. The returned `BackendChoice` records the reason, so a user can ask
any layer why it runs the way it does (`module.backend_choice.reason`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tenfold.engine import native
from tenfold.engine.operands import GEMMS
from tenfold.engine.recipes import Recipe
from tenfold.formats.scheme import Family

# how a quantized layer multiplies: fp32 matmuls of dequantized values, or torch._scaled_mm on the codes
# (not to be confused with `tenfold.formats.fake.QUANT_PATHS`, how its operands are fake-quantized)
GEMM_BACKENDS = ("auto", "emulated", "native")


@dataclass(frozen=True, kw_only=True)
class BackendChoice:
    """The GEMM backend of one layer and why.

    Fields:
        backend: `emulated` (quantize -> dequantize -> fp32 matmul) or `native` (torch._scaled_mm).
        reason: one sentence, naming the device and what decided it.
    """

    backend: str
    reason: str

    def __post_init__(self) -> None:
        if self.backend not in ("emulated", "native"):
            raise ValueError(f"backend must be emulated or native, got {self.backend!r}")


def _capability(device: torch.device) -> tuple[int, int] | None:
    if device.type != "cuda":
        return None
    return torch.cuda.get_device_capability(device)


def native_obstacle(recipe: Recipe, device: torch.device, in_features: int, out_features: int) -> str | None:
    """Why `recipe` cannot run natively for an (out, in) layer on `device`; None when it can."""
    if device.type not in ("cuda", "cpu"):
        return f"no native low-precision GEMMs on {device.type}"
    cap = _capability(device)
    for g in GEMMS:
        sa, sb = recipe.operand(g, "a"), recipe.operand(g, "b")  # after backward_override
        if sa is None and sb is None:
            continue
        if sa is None or sb is None:
            return f"{g} quantizes only one operand; native GEMMs need both in low precision"
        why = native.unsupported_reason(sa, sb, cap)
        if why is not None:
            return f"{g}: {why}"
        # the reduction dims of fprop (in) and dgrad (out) must fit the hardware blocks; wgrad (tokens) is
        # padded per call
        k = in_features if g == "fprop" else out_features if g == "dgrad" else None
        if k is not None and cap is not None:
            need = 32 if sa.family == Family.MX else 16
            if k % need:
                return f"{g}: reduction dim {k} is not a multiple of {need}"
    return None


def select_backend(
    recipe: Recipe,
    device: torch.device | str,
    *,
    requested: str = "auto",
    in_features: int = 0,
    out_features: int = 0,
) -> BackendChoice:
    """Pick the GEMM backend for a layer; `requested` = auto | emulated | native.

    `auto` takes native only on a CUDA GPU that has the tensor cores for every GEMM of the recipe; on a
    CPU it stays emulated (torch's CPU `_scaled_mm` dequantizes, so it buys nothing). An explicit
    `native` that cannot be honoured raises ValueError with the reason."""
    if requested not in GEMM_BACKENDS:
        raise ValueError(f"unknown backend {requested!r}; valid: {', '.join(GEMM_BACKENDS)}")
    device = torch.device(device)
    if not recipe.quantizes:
        return BackendChoice(
            backend="emulated", reason=f"recipe {recipe.name} quantizes nothing (fp32 matmuls)"
        )
    if requested == "emulated":
        return BackendChoice(backend="emulated", reason="emulated backend requested")
    obstacle = native_obstacle(recipe, device, in_features, out_features)
    if requested == "native":
        if obstacle is not None:
            raise ValueError(f"native backend requested for recipe {recipe.name} on {device}, but {obstacle}")
        return BackendChoice(backend="native", reason=f"native backend requested; {device} supports it")
    if device.type != "cuda":
        return BackendChoice(
            backend="emulated", reason=f"{device.type}: no low-precision tensor cores, emulating bit-exactly"
        )
    if obstacle is not None:
        return BackendChoice(backend="emulated", reason=f"{device}: {obstacle}")
    cap = _capability(device)
    assert cap is not None
    return BackendChoice(
        backend="native",
        reason=f"{device} (SM{cap[0]}{cap[1]}) has tensor cores for every GEMM of {recipe.name}",
    )
