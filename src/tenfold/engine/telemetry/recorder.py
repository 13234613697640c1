"""Dynamic-range telemetry: what quantization does to every GEMM operand of every linear layer.

For each sampled step, for every converted layer and each of its six GEMM operands (the table in
`tenfold.engine.operands`), `operand_stats` computes the statistics of `records.OperandStats` (amax,
scale histogram, clipped and underflowed fractions, SQNR, clipped blocks).

Figures are taken in the GEMM's own domain: blocks along the reduction axis, after the Hadamard
transform where the recipe rotates (the rotation is orthonormal, so the SQNR is that of the operand),
with the layer's own seeds and stochastic-rounding offset, so they describe the exact values the
GEMMs multiplied. The same statistics under other recipes ("what-if", Transformer Engine's what-if
stats) are computed from the same tensors without touching training; both FP8 and FP4 what-ifs can run
at once (asked for in NVIDIA/TransformerEngine issue #2801).

A `Recorder` is passed explicitly (`rec.attach(model)`, or `Trainer(..., recorder=rec)`); it samples
every `every` steps (`begin_step` / `end_step` around a step) and writes JSONL records and TensorBoard
event files (`writers.py`). There is no global state: detach it and the model is untouched.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tenfold.engine.gemm import SR_STRIDE
from tenfold.engine.linear import QuantLinear
from tenfold.engine.operands import OPERANDS, TENSOR_INDEX, Operand
from tenfold.engine.quant import blocked_parts
from tenfold.engine.recipes import Recipe, recipe
from tenfold.engine.telemetry.records import OperandRecord, OperandStats, TelemetryConfig
from tenfold.engine.telemetry.writers import Writers
from tenfold.formats import Scheme
from tenfold.formats.metrics import sqnr_db
from tenfold.formats.rounding import Rounding
from tenfold.formats.scheme import Family, Scaling

# the operands whose tensors the forward hook sees (x, W), and those the gradient hook sees (dy)
FORWARD_OPERANDS = tuple(o for o in OPERANDS if o.in_forward)
BACKWARD_OPERANDS = tuple(o for o in OPERANDS if not o.in_forward)
SCALE_KINDS = {Family.MX: "e8m0_exponent", Family.NVFP4: "e4m3_value"}


def operand_parts(
    x: torch.Tensor, s: Scheme, axis: int, *, scale: torch.Tensor | None = None, offset: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(v, v · enc, rounded elements q, decoded operand q · dec1 · dec2) of `x` in the blocked view.

    The engine's own fused stages (`quant.blocked_parts`), so the last tensor holds the bits the GEMM
    multiplies; the tests hold that equality."""
    p = blocked_parts(x, s, axis, scale=scale, offset=offset)
    return p.v, p.scaled, p.q, p.decoded


def _scale_hist(dec1: torch.Tensor, s: Scheme) -> tuple[str, torch.Tensor]:
    """(kind, per-block value that the histogram counts)."""
    flat = dec1.reshape(-1)
    if s.family == Family.NVFP4:
        return SCALE_KINDS[Family.NVFP4], flat
    _, exp = torch.frexp(flat)  # flat = m * 2^exp with m in [0.5, 1): floor(log2) = exp - 1
    kind = SCALE_KINDS.get(s.family, "log2_scale_inv")
    return kind, (exp - 1).to(torch.float32)


def operand_stats(
    x: torch.Tensor, s: Scheme, axis: int, *, scale: torch.Tensor | None = None, offset: int = 0
) -> OperandStats:
    """Statistics of quantizing the 2-D operand `x` with `s`, blocks along `axis` (0 or 1).

    `scale`: the per-tensor scale of delayed scaling; `offset`: the stochastic-rounding counter offset
    (the engine uses sr_step · 2^32)."""
    with torch.no_grad():
        p = blocked_parts(x, s, axis, scale=scale, offset=offset)
        v, dims, q, dec1 = p.v, p.dims, p.q, p.dec1
        numel = x.numel()
        clipped = p.scaled.abs() > s.element.max
        nonzero = v != 0
        flushed = nonzero & (q == 0)  # -0.0 == 0 holds for values, unlike code bytes (0x80 != 0x00)
        if dims is None:
            blocks_clipped = int(clipped.any())
        else:
            blocks_clipped = int(clipped.any(dim=dims, keepdim=True).sum())
        # dec1 holds one decode scale per block (keepdim shape; 0-d per tensor)
        n_blocks = dec1.numel()
        kind, hv = _scale_hist(dec1, s)
        vals, counts = torch.unique(hv, return_counts=True)
        sq = sqnr_db(v, p.decoded)
        return OperandStats(
            scheme=s.name,
            numel=numel,
            amax=float(x.detach().abs().amax()) if numel else 0.0,
            clip_frac=int(clipped.sum()) / numel if numel else 0.0,
            underflow_frac=int(flushed.sum()) / numel if numel else 0.0,
            zero_frac=(numel - int(nonzero.sum())) / numel if numel else 0.0,
            sqnr_db=None if math.isinf(sq) and sq > 0 else sq,
            scale_kind=kind,
            scale_hist=tuple((float(a), int(c)) for a, c in zip(vals.tolist(), counts.tolist(), strict=True)),
            scale_min=float(dec1.min()),
            scale_max=float(dec1.max()),
            blocks=n_blocks,
            blocks_clipped_frac=blocks_clipped / n_blocks,
        )


def _linears(model: nn.Module, with_hp: bool) -> list[tuple[str, nn.Module]]:
    out = []
    for name, m in model.named_modules():
        if isinstance(m, QuantLinear) or (with_hp and isinstance(m, nn.Linear)):
            out.append((name, m))
    return out


class Recorder:
    """Samples quantization statistics of a model's linear layers every `every` steps.

    >>> rec = Recorder("runs/x", every=25, what_if=("mxfp8",))    # doctest: +SKIP
    >>> rec.attach(model)                                         # doctest: +SKIP
    >>> for step in range(n):                                     # doctest: +SKIP
    ...     rec.begin_step(step); loss = f(model); loss.backward(); rec.end_step()

    Records are kept in `records` and, when `out_dir` is given, appended to `out_dir/telemetry.jsonl`
    and TensorBoard event files in `out_dir/tb` at each `end_step`. Call `close()` (or use `with`).
    """

    def __init__(self, out_dir: str | Path | None = None, **config: Any) -> None:
        self.config = TelemetryConfig(**config)
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.records: list[OperandRecord] = []
        self._pending: list[OperandRecord] = []
        self._what_if: dict[str, Recipe] = {n: recipe(n) for n in self.config.what_if}
        self._handles: list[Any] = []
        self._seen: set[tuple[str, str]] = set()
        self.step: int | None = None
        self.sampling = False
        self._writers = Writers(self.out_dir, self.config) if self.out_dir is not None else None

    # -- lifecycle -----------------------------------------------------------------------------------
    def attach(self, model: nn.Module) -> list[str]:
        """Hook every QuantLinear (and plain nn.Linear, for what-if figures) of `model`; returns names."""
        with_hp = self.config.high_precision_layers and bool(self._what_if)
        names = []
        for name, m in _linears(model, with_hp):
            self._handles.append(m.register_forward_hook(self._forward_hook(name)))
            names.append(name)
        return names

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def begin_step(self, step: int) -> bool:
        """Start training step `step`; returns whether it is sampled."""
        self.step = int(step)
        self.sampling = self.step % self.config.every == 0
        self._seen.clear()
        return self.sampling

    def end_step(self) -> list[OperandRecord]:
        """Finish the step: flush its records to the writers; returns them."""
        done, self._pending = self._pending, []
        if self.config.keep:
            self.records.extend(done)
        if self._writers is not None and done:
            self._writers.write(done)
        self.sampling = False
        return done

    def close(self) -> None:
        if self._pending:
            self.end_step()
        self.detach()
        if self._writers is not None:
            self._writers.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- hooks ---------------------------------------------------------------------------------------
    def _forward_hook(self, name: str):
        def hook(module: nn.Module, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
            if not self.sampling or not torch.is_grad_enabled() or (name, "fwd") in self._seen:
                return
            self._seen.add((name, "fwd"))
            x = inputs[0].detach().reshape(-1, inputs[0].shape[-1])
            is_q = isinstance(module, QuantLinear)
            w = (module._weight_out_in() if is_q else module.weight).detach()
            offset = int(module.sr_step) * SR_STRIDE if is_q else 0
            self._record(name, module, FORWARD_OPERANDS, {"x": x, "w": w}, offset)
            if isinstance(output, torch.Tensor) and output.requires_grad:
                output.register_hook(self._dy_hook(name, module, offset))

        return hook

    def _dy_hook(self, name: str, module: nn.Module, offset: int):
        def hook(dy: torch.Tensor) -> None:
            if (name, "bwd") in self._seen:
                return
            self._seen.add((name, "bwd"))
            self._record(
                name, module, BACKWARD_OPERANDS, {"dy": dy.detach().reshape(-1, dy.shape[-1])}, offset
            )

        return hook

    def _record(
        self,
        name: str,
        module: nn.Module,
        operands: tuple[Operand, ...],
        tensors: dict[str, torch.Tensor],
        offset: int,
    ) -> None:
        assert self.step is not None
        is_q = isinstance(module, QuantLinear)
        for op in operands:
            gemm, side, t, axis = op.gemm, op.side, op.tensor, op.axis
            if is_q:
                s = getattr(module.plan, op.slot)
                if s is not None:
                    if s.rounding == Rounding.STOCHASTIC and not self.config.exact_sr:
                        s = s.with_options(rounding=Rounding.NEAREST)
                    scale = None
                    if s.scaling == Scaling.DELAYED:
                        i = TENSOR_INDEX[t]
                        scale = module.scale[i : i + 1]
                    st = operand_stats(tensors[t], s, axis, scale=scale, offset=offset)
                    self._add(name, gemm, side, t, module.recipe.name, False, st)
            for rname, r in self._what_if.items():
                s = r.operand(gemm, side)
                if s is None or s.scaling == Scaling.DELAYED:
                    continue  # a what-if has no amax history; delayed what-ifs are skipped
                st = operand_stats(tensors[t], s, axis)
                self._add(name, gemm, side, t, rname, True, st)

    def _add(
        self, layer: str, gemm: str, side: str, tensor: str, rname: str, what_if: bool, st: OperandStats
    ) -> None:
        assert self.step is not None
        self._pending.append(
            OperandRecord(
                step=self.step,
                layer=layer,
                gemm=gemm,
                side=side,
                tensor=tensor,
                recipe=rname,
                what_if=what_if,
                stats=st,
            )
        )
