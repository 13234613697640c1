"""Dynamic-range telemetry: what quantization does to every GEMM operand of every linear layer.

For each sampled step, for every converted layer and each of its six GEMM operands (fprop: x, W;
dgrad: dy, W; wgrad: dy, x; see `recipes.py`), `operand_stats` records

* ``amax``: the operand's absolute maximum (before any Hadamard rotation);
* ``scale_hist``: the histogram of the scales chosen for its blocks: E8M0 exponents (MX), E4M3 block
  scale values (NVFP4), or log2 of the fp32 decode scale (FP8 per tensor, row or block), with their
  min and max (the ``scale_inv`` min/max of Transformer Engine's `LogFp8TensorStats`);
* ``clip_frac``: the fraction of elements saturated: |x · enc| above the element format's largest
  magnitude before rounding (they are clamped to it; e.g. OCP FLOOR scales put a block's amax in
  [448, 512) for E4M3, research notes §1);
* ``underflow_frac``: the fraction of elements that are non-zero but quantize to ±0. Values are
  compared, not code bytes, so a negative element that rounds to −0 (code 0x80 in FP8, 0x8 in FP4)
  counts: the bug fixed in TE PR#2107 was comparing codes with 0x00;
* ``sqnr_db``: 10 log10(|v|² / |v − Q(v)|²) (None when exact);
* ``blocks_clipped_frac``: the fraction of scale blocks with at least one clipped element (a per-block
  view users asked TE for, TE#2801).

Figures are taken in the GEMM's own domain: blocks along the reduction axis, after the Hadamard
transform where the recipe rotates (the rotation is orthonormal, so the SQNR is that of the operand),
with the layer's own seeds and stochastic-rounding offset, so they describe the exact values the
GEMMs multiplied. The same statistics under other recipes ("what-if", TE's what-if stats) are computed
from the same tensors without touching training; both FP8 and FP4 what-ifs can run at once (TE#2801).

A `Recorder` is passed explicitly (`rec.attach(model)`, or `Trainer(..., recorder=rec)`); it samples
every `every` steps (`begin_step` / `end_step` around a step) and writes JSONL records and TensorBoard
event files (`telemetry_io.py`). There is no global state: detach it and the model is untouched.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tenfold.engine.gemm import SR_STRIDE, TENSOR_INDEX
from tenfold.engine.linear import QuantLinear
from tenfold.engine.quant import _blocked, _check, _prepare, _round, axis_matters
from tenfold.engine.recipes import OPERAND_TENSORS, RECIPE_NAMES, Recipe, recipe
from tenfold.formats import Scheme
from tenfold.formats.metrics import sqnr_db
from tenfold.formats.rounding import Rounding, sr_noise
from tenfold.formats.scheme import Family, Scaling

DEFAULT_EVERY = 100
# (gemm, side) -> the axis of the stored 2-D operand that its blocks run along (see gemm.py)
OPERAND_AXIS = {
    ("fprop", "a"): 1,
    ("fprop", "b"): 1,
    ("dgrad", "a"): 1,
    ("dgrad", "b"): 0,
    ("wgrad", "a"): 0,
    ("wgrad", "b"): 0,
}
FORWARD_SLOTS = (("fprop", "a"), ("fprop", "b"), ("dgrad", "b"), ("wgrad", "b"))
BACKWARD_SLOTS = (("dgrad", "a"), ("wgrad", "a"))
SCALE_KINDS = {Family.MX: "e8m0_exponent", Family.NVFP4: "e4m3_value"}


@dataclass(frozen=True, kw_only=True)
class OperandStats:
    """Quantization statistics of one 2-D GEMM operand under one scheme (see the module docstring).

    Fields:
        scheme: scheme name.
        numel: elements of the operand (padding excluded).
        amax: absolute maximum of the operand.
        clip_frac: fraction of elements saturated to the element format's max.
        underflow_frac: fraction of elements that are non-zero and quantize to ±0.
        zero_frac: fraction of elements that are exactly zero before quantization.
        sqnr_db: signal-to-quantization-noise ratio in dB; None when the quantization is exact.
        scale_kind: what `scale_hist` counts: e8m0_exponent | e4m3_value | log2_scale_inv.
        scale_hist: (value, count) pairs, ascending, one count per scale block.
        scale_min, scale_max: smallest and largest first-level block scale (fp32 value: the E8M0 or
            E4M3 scale itself; for FP8 the decode scale 1/scale).
        blocks: number of scale blocks.
        blocks_clipped_frac: fraction of blocks with at least one clipped element.
    """

    scheme: str
    numel: int
    amax: float
    clip_frac: float
    underflow_frac: float
    zero_frac: float
    sqnr_db: float | None
    scale_kind: str
    scale_hist: tuple[tuple[float, int], ...]
    scale_min: float
    scale_max: float
    blocks: int
    blocks_clipped_frac: float


def _noise(xp: torch.Tensor, v: torch.Tensor, s: Scheme, axis: int, offset: int) -> torch.Tensor | None:
    """The stochastic-rounding noise the engine uses for this operand (indexed as in `quant._apply`)."""
    if s.rounding != Rounding.STOCHASTIC:
        return None
    pr, pc = xp.shape
    if axis == 0 and axis_matters(s):
        noise = sr_noise((pc, pr), s.seed, offset, xp.device).t()
    else:
        noise = sr_noise((pr, pc), s.seed, offset, xp.device)
    return noise.reshape(v.shape)


def operand_parts(
    x: torch.Tensor, s: Scheme, axis: int, *, scale: torch.Tensor | None = None, offset: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(v, v · enc, rounded elements q, decoded operand q · dec1 · dec2) of `x` in the blocked view.

    The engine's own fused stages (`quant._prepare`, then rounding and decoding in `quant._apply`'s
    order), so the last tensor holds the bits the GEMM multiplies; the tests hold that equality."""
    _check(x, s, axis, scale)
    xp, enc, dec1, dec2 = _prepare(x.detach(), s, axis, scale)
    v, _ = _blocked(xp, s, axis)
    scaled = v * enc
    q = _round(scaled, s, _noise(xp, v, s, axis, offset))
    return v, scaled, q, q * dec1 * dec2


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
        _check(x, s, axis, scale)
        xp, enc, dec1, dec2 = _prepare(x.detach(), s, axis, scale)
        v, dims = _blocked(xp, s, axis)
        scaled = v * enc
        q = _round(scaled, s, _noise(xp, v, s, axis, offset))
        numel = x.numel()
        clipped = scaled.abs() > s.element.max
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
        sq = sqnr_db(v, q * dec1 * dec2)
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


@dataclass(frozen=True, kw_only=True)
class TelemetryConfig:
    """How a `Recorder` samples.

    Fields:
        every: record on steps where step % every == 0 (the first step is always sampled).
        what_if: recipe names whose statistics are also computed for every operand (training unchanged).
        high_precision_layers: also record what-if figures for linear layers left in high precision
            (the LM head, NVIDIA's BF16 tail), which have no actual quantization to report.
        jsonl: write `telemetry.jsonl` in the output folder.
        tensorboard: write TensorBoard event files under `tb/` in the output folder.
        keep: also keep every record in `Recorder.records` (memory grows with the run; off for long runs).
        exact_sr: measure stochastically rounded operands (NVFP4 gradients) with the very noise training
            drew. Off by default: regenerating the counter-based noise is most of a sample's cost, so
            such operands are measured under round-to-nearest, the same scales, and the expected SR
            result (SR is unbiased; its underflow is probabilistic rather than a flush).
    """

    every: int = DEFAULT_EVERY
    what_if: tuple[str, ...] = ()
    high_precision_layers: bool = True
    jsonl: bool = True
    tensorboard: bool = True
    keep: bool = True
    exact_sr: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.every, int) or self.every < 1:
            raise ValueError(f"every must be an int >= 1, got {self.every!r}")
        if isinstance(self.what_if, str):
            raise ValueError(f"what_if must be a tuple of recipe names, got the string {self.what_if!r}")
        object.__setattr__(self, "what_if", tuple(self.what_if))
        bad = [n for n in self.what_if if n not in RECIPE_NAMES]
        if bad:
            raise ValueError(f"unknown what-if recipe(s) {', '.join(bad)}; valid: {', '.join(RECIPE_NAMES)}")


@dataclass(frozen=True, kw_only=True)
class OperandRecord:
    """One operand's statistics at one step (a JSONL line).

    Fields:
        step: training step.
        layer: qualified module name.
        gemm: fprop | dgrad | wgrad; side: a | b; tensor: x | w | dy.
        recipe: the recipe the numbers describe (the layer's own, or a what-if recipe).
        what_if: True for what-if figures (not what training used).
        stats: the statistics.
    """

    step: int
    layer: str
    gemm: str
    side: str
    tensor: str
    recipe: str
    what_if: bool
    stats: OperandStats

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "stats"}
        st = asdict(self.stats)
        st["scale_hist"] = [list(p) for p in self.stats.scale_hist]
        return {**d, **st}


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
        from tenfold.engine.telemetry.writers import Writers

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
            self._record(name, module, FORWARD_SLOTS, {"x": x, "w": w}, offset)
            if isinstance(output, torch.Tensor) and output.requires_grad:
                output.register_hook(self._dy_hook(name, module, offset))

        return hook

    def _dy_hook(self, name: str, module: nn.Module, offset: int):
        def hook(dy: torch.Tensor) -> None:
            if (name, "bwd") in self._seen:
                return
            self._seen.add((name, "bwd"))
            self._record(name, module, BACKWARD_SLOTS, {"dy": dy.detach().reshape(-1, dy.shape[-1])}, offset)

        return hook

    def _record(
        self,
        name: str,
        module: nn.Module,
        slots: tuple[tuple[str, str], ...],
        tensors: dict[str, torch.Tensor],
        offset: int,
    ) -> None:
        assert self.step is not None
        is_q = isinstance(module, QuantLinear)
        for gemm, side in slots:
            t = OPERAND_TENSORS[(gemm, side)]
            axis = OPERAND_AXIS[(gemm, side)]
            if is_q:
                s = getattr(module.plan, f"{gemm}_{side}")
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
