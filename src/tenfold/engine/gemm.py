"""The quantized linear GEMMs as one autograd function, with fprop, dgrad and wgrad written out.

For y = x·Wᵀ + b with x flattened to (T, in) and W (out, in), each operand quantized along its GEMM's
reduction axis (Q_k: blocks along axis k of the matrix as stored; the table is `operands.OPERANDS`):

    fprop   out = Q_1(x) · Q_1(W)ᵀ       reduction over in-features
    dgrad   dx  = Q_1(dy) · Q_0(W)       reduction over out-features
    wgrad   dW  = Q_0(dy)ᵀ · Q_0(x)      reduction over tokens

Operands are quantized in the layout they are stored in (`quant.operand`), and the products are matmuls of
the dequantized values accumulated as the plan's accumulator model says (`emulated`; fp32 by default, see
`accumulate.py`) or `torch._scaled_mm` on the codes (`native`, see `native.py`). An operand quantization
is reused across GEMMs only where the values are provably the same: per-tensor scales and 2-D blocks do
not depend on the axis (the 16x16 NVFP4 and 128x128 FP8 weight blocks give W and Wᵀ the same codes:
NVIDIA, "Pretraining Large Language Models with NVFP4", arXiv 2509.25149 §4.3,
https://arxiv.org/abs/2509.25149); stochastic rounding is never reused.

`quantized_linear_reference` computes the same three products with the formats core's plain reference
quantizer; tests hold `QuantizedLinearFunction` bit-exact to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tenfold.engine import native
from tenfold.engine.accumulate import matmul
from tenfold.engine.operands import OPERANDS, TENSOR_INDEX
from tenfold.engine.quant import axis_matters, operand, reference_operand
from tenfold.formats import Scheme
from tenfold.formats.rounding import Rounding
from tenfold.formats.scheme import Scaling

SR_STRIDE = 1 << 32  # noise counter advance per step: element i of step n uses counter n * 2^32 + i


@dataclass(frozen=True, kw_only=True)
class GemmPlan:
    """The resolved operand schemes of one quantized linear layer (per-module seeds applied).

    Fields:
        fprop_a, fprop_b, dgrad_a, dgrad_b, wgrad_a, wgrad_b: operand schemes (None = high precision).
        quant_backend: how operands are fake-quantized: auto | eager | compiled | reference.
        native: multiply codes with torch._scaled_mm instead of fp32 matmuls of dequantized values.
        backward_override: the recipe's (`Recipe.backward_override`); with "dequantized" the backward GEMMs
            multiply the fprop-quantized x and W (saved in forward) and the unquantized dy.
        accumulate, promote_interval: the emulated GEMMs' accumulator model and its promotion interval
            (`accumulate.matmul`); the native path ignores them.
    """

    fprop_a: Scheme | None
    fprop_b: Scheme | None
    dgrad_a: Scheme | None
    dgrad_b: Scheme | None
    wgrad_a: Scheme | None
    wgrad_b: Scheme | None
    quant_backend: str = "auto"
    native: bool = False
    backward_override: str | None = None
    accumulate: str = "fp32"
    promote_interval: int | None = 128

    @property
    def dequantized_backward(self) -> bool:
        return self.backward_override == "dequantized"

    @property
    def reuse_w(self) -> bool:
        return self.dequantized_backward or _reusable(self.fprop_b, self.dgrad_b)

    @property
    def reuse_x(self) -> bool:
        return self.dequantized_backward or _reusable(self.fprop_a, self.wgrad_b)

    @property
    def reuse_dy(self) -> bool:
        return _reusable(self.dgrad_a, self.wgrad_a)

    @property
    def stochastic(self) -> bool:
        """Whether any operand rounds stochastically (then the step counter advances per backward)."""
        ops = (getattr(self, o.slot) for o in OPERANDS)
        return any(s is not None and s.rounding == Rounding.STOCHASTIC for s in ops)

    def delayed(self, s: Scheme | None) -> bool:
        return s is not None and s.scaling == Scaling.DELAYED


def _reusable(s1: Scheme | None, s2: Scheme | None) -> bool:
    """Whether quantizing one matrix along axis 1 with s1 and along axis 0 with s2 gives the same values."""
    if s1 is None or s1 != s2 or s1.rounding == Rounding.STOCHASTIC:
        return False
    return not axis_matters(s1)


def _q(
    x: torch.Tensor,
    s: Scheme | None,
    axis: int,
    scales: torch.Tensor | None,
    tensor: str,
    offset: torch.Tensor,
    backend: str,
) -> torch.Tensor:
    """One operand in the GEMM domain (fp32, x's layout); high-precision operands pass through."""
    if s is None:
        return x.to(torch.float32)
    scale = None
    if s.scaling == Scaling.DELAYED:
        assert scales is not None, "delayed scaling without scale buffers"
        i = TENSOR_INDEX[tensor]
        scale = scales[i : i + 1]
    if backend == "reference":
        return reference_operand(x, s, axis, scale=scale, offset=offset)
    return operand(x, s, axis, scale=scale, offset=offset, backend=backend)


def _mm(a: torch.Tensor, b: torch.Tensor, plan: GemmPlan, out: torch.Tensor | None = None) -> torch.Tensor:
    """One emulated GEMM a·b with the plan's accumulator (fp32: exactly torch.mm)."""
    return matmul(a, b, plan.accumulate, plan.promote_interval, out=out)


def observe_amax(history: torch.Tensor | None, tensor: str, x: torch.Tensor) -> None:
    """Record the amax of `x` (tensor x, w or dy) in slot 0 of its delayed-scaling history row, in place.

    `history` is a layer's (3, L) amax buffer (None when nothing is delayed); slot 0 keeps the running
    maximum of the current step until `QuantLinear.update_scaling` rolls it."""
    if history is not None:
        i = TENSOR_INDEX[tensor]
        history[i, 0] = torch.maximum(history[i, 0], x.detach().abs().amax().to(torch.float32))


class QuantizedLinearFunction(torch.autograd.Function):
    """out = x·Wᵀ + bias with each GEMM's operands quantized per `plan` (x is 2-D: tokens × in)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        scales: torch.Tensor | None,
        history: torch.Tensor | None,
        sr_step: torch.Tensor,
        plan: GemmPlan,
        lead: tuple[int, ...],
    ) -> torch.Tensor:
        """`sr_step` (a module buffer) sets this pass's noise offset; when the plan rounds anything
        stochastically it is advanced by one at the end of backward. The output has shape
        (*lead, out_features) and is written in place, so it is not a view (FSDP2 hooks need that)."""
        be = plan.quant_backend
        offset = sr_step * SR_STRIDE
        n = weight.shape[0]
        out = torch.empty((*lead, n), dtype=torch.float32, device=x.device)
        out2 = out.view(-1, n)
        if plan.native and plan.fprop_a is not None and plan.fprop_b is not None:
            out2.copy_(native.scaled_mm(x, plan.fprop_a, weight, plan.fprop_b, scales, ("x", "w"), offset))
            xq = wq = None
            if plan.dequantized_backward:  # backward multiplies the fprop operands' values
                xq = _q(x, plan.fprop_a, 1, scales, "x", offset, be)
                wq = _q(weight, plan.fprop_b, 1, scales, "w", offset, be)
        else:
            xq = _q(x, plan.fprop_a, 1, scales, "x", offset, be)
            wq = _q(weight, plan.fprop_b, 1, scales, "w", offset, be)
            _mm(xq, wq.t(), plan, out=out2)
        if bias is not None:
            out2.add_(bias.to(torch.float32))
        # keep what backward needs: the operand itself, or its quantized values when they are reused
        keep_x = xq if plan.reuse_x and xq is not None else x
        keep_w = wq if plan.reuse_w and wq is not None else weight
        ctx.save_for_backward(keep_x, keep_w, scales, history, offset)
        ctx.plan = plan
        ctx.sr_counter = sr_step if plan.stochastic else None
        ctx.reused = (keep_x is xq, keep_w is wq)
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, dy: torch.Tensor):  # type: ignore[override]
        keep_x, keep_w, scales, history, offset = ctx.saved_tensors
        plan: GemmPlan = ctx.plan
        dy = dy.reshape(-1, dy.shape[-1])
        x_reused, w_reused = ctx.reused
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        be = plan.quant_backend
        if plan.delayed(plan.dgrad_a) or plan.delayed(plan.wgrad_a):
            observe_amax(history, "dy", dy)
        dx = dw = db = None
        dyq = None
        if ctx.needs_input_grad[0]:
            if plan.native and plan.dgrad_a is not None and plan.dgrad_b is not None:
                # dx = dy · W: K = out-features, so W enters as Wᵀ (in, out) with K last
                w_t = keep_w.t().contiguous()
                dx = native.scaled_mm(dy, plan.dgrad_a, w_t, plan.dgrad_b, scales, ("dy", "w"), offset)
            else:
                dyq = _q(dy, plan.dgrad_a, 1, scales, "dy", offset, be)
                wq = keep_w if w_reused else _q(keep_w, plan.dgrad_b, 0, scales, "w", offset, be)
                dx = _mm(dyq, wq, plan)
            dx = dx.to(x_dtype)
        if ctx.needs_input_grad[1]:
            if plan.native and plan.wgrad_a is not None and plan.wgrad_b is not None:
                dy_t, x_t = dy.t().contiguous(), keep_x.t().contiguous()
                dw = native.scaled_mm(dy_t, plan.wgrad_a, x_t, plan.wgrad_b, scales, ("dy", "x"), offset)
            else:
                if dyq is not None and plan.reuse_dy:
                    dyq_t = dyq
                else:
                    dyq_t = _q(dy, plan.wgrad_a, 0, scales, "dy", offset, be)
                xq_t = keep_x if x_reused else _q(keep_x, plan.wgrad_b, 0, scales, "x", offset, be)
                dw = _mm(dyq_t.t(), xq_t, plan)
            dw = dw.to(w_dtype)
        if b_dtype is not None and ctx.needs_input_grad[2]:
            db = dy.to(torch.float32).sum(0).to(b_dtype)
        if ctx.sr_counter is not None:
            ctx.sr_counter.add_(1)
        return dx, dw, db, None, None, None, None, None


def quantized_linear_reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    dy: torch.Tensor,
    plan: GemmPlan,
    *,
    scales: torch.Tensor | None = None,
    offset: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, dx, dW) without bias, each operand quantized independently by the plain reference.

    The same products as `QuantizedLinearFunction` with no reuse and no fusion: the oracle of the tests.
    """
    off = torch.tensor(offset, dtype=torch.int64)
    tensors = {"x": x.detach(), "w": weight.detach(), "dy": dy.detach()}
    q = {
        o.slot: _q(tensors[o.tensor], getattr(plan, o.slot), o.axis, scales, o.tensor, off, "reference")
        for o in OPERANDS
    }
    if plan.dequantized_backward:  # the backward GEMMs take x and W as fprop quantized them
        q["dgrad_b"], q["wgrad_b"] = q["fprop_b"], q["fprop_a"]
    out = _mm(q["fprop_a"], q["fprop_b"].t(), plan)
    dx = _mm(q["dgrad_a"], q["dgrad_b"], plan)
    dw = _mm(q["wgrad_a"].t(), q["wgrad_b"], plan)
    return out, dx, dw
