"""`sensitivity(model, batches)`: quantize one linear layer at a time and measure what it costs.

For every layer that `convert()` would quantize and every candidate recipe, that one layer alone is
swapped for a `QuantLinear` (through `convert` with an include pattern matching exactly its name), the
model is evaluated on held-out batches under `torch.no_grad()` in eval mode, and the layer is restored.
Each row records the mean loss, its increase over the unquantized model (absolute and relative), the SQNR
of the model output against the unquantized output and the layer's share of the linear-layer GEMM FLOPs.
Rows are ranked most sensitive first (largest loss increase).
`tenfold.engine.autoprecision.policy.auto_policy` turns
the increases into a per-layer format choice; the sum of single-layer increases is its first-order
estimate of the joint effect.

Eligibility follows `ConversionPolicy`: include/exclude patterns (the LM head is excluded by default, as
NVIDIA's FP8/NVFP4 recipes keep it in BF16: NVIDIA, "Pretraining Large Language Models with NVFP4", arXiv
2509.25149 §4.1, https://arxiv.org/abs/2509.25149) and whole-block fit of the reduction dims. The default
policy here keeps no blocks in high precision by position (`hp_last_blocks=0`), since whether the last blocks
need high precision is what this measurement is for; pass a policy to change it.

A high-precision candidate (``bf16``) quantizes nothing, so `convert` converts no layer under it; it is
measured on the layers the policy admits and serves as the control: its delta is 0 and its SQNR infinite
unless the evaluation itself is not deterministic.

Delayed-scaling recipes (``fp8_delayed``) start from an empty amax history, which an evaluation pass
does not update, so their rows describe a freshly converted layer, not one after training steps.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tenfold.engine.autoprecision.policy import linear_flops
from tenfold.engine.convert import ConversionPolicy, LayerDecision, convert, replace_module
from tenfold.engine.experts import is_fused_experts
from tenfold.engine.recipes import RECIPE_NAMES, Recipe, recipe
from tenfold.formats.metrics import sqnr_db

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
HEADER = (
    "rank",
    "layer",
    "candidate",
    "loss",
    "delta",
    "rel_delta",
    "output_sqnr_db",
    "grad_sqnr_db",
    "gemm_flops_share",
)
DEFAULT_POLICY = ConversionPolicy(hp_first_blocks=0, hp_last_blocks=0)
SCORES = ("loss", "gradient")


def cross_entropy_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy, computed in fp32 as `tenfold.train.Trainer` does."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


@dataclass(frozen=True, kw_only=True)
class SensitivityRow:
    """One layer quantized alone with one candidate recipe.

    Fields:
        layer: qualified module name.
        candidate: recipe name.
        loss: mean loss over the batches with this layer quantized.
        delta: loss - base loss (positive = worse).
        rel_delta: delta / base loss.
        output_sqnr_db: SQNR of the model output against the unquantized output (inf when identical).
        gemm_flops_share: the layer's share of the model's linear-layer GEMM FLOPs (attention's QK^T and
            PV products are not linear layers and are not counted).
        grad_sqnr_db: with `gradients=True`, the SQNR of the gradient of every parameter (concatenated)
            against the unquantized model's, over the same batches; None when not measured.
    """

    layer: str
    candidate: str
    loss: float
    delta: float
    rel_delta: float
    output_sqnr_db: float
    gemm_flops_share: float
    grad_sqnr_db: float | None = None

    @property
    def grad_error(self) -> float | None:
        """Relative error energy of the gradient, |g - g_ref|^2 / |g_ref|^2 = 10^(-SQNR/10)."""
        if self.grad_sqnr_db is None:
            return None
        return 0.0 if math.isinf(self.grad_sqnr_db) else 10.0 ** (-self.grad_sqnr_db / 10.0)

    def to_dict(self) -> dict[str, Any]:
        """Plain data; an infinite SQNR becomes None so the result is valid JSON."""
        d = asdict(self)
        for k in ("output_sqnr_db", "grad_sqnr_db"):
            if d[k] is not None and not math.isfinite(d[k]):
                d[k] = None
        return d


@dataclass(frozen=True, kw_only=True)
class SensitivityTable:
    """The result of `sensitivity`: rows ranked most sensitive first.

    Fields:
        base_loss: mean loss of the unquantized model over the batches.
        n_batches: number of batches evaluated per row.
        candidates: the candidate recipe names, in the order given.
        rows: one row per (eligible layer, candidate), by delta descending (then SQNR ascending, name).
        skipped: (layer, candidate, reason) for layers the policy keeps in high precision.
    """

    base_loss: float
    n_batches: int
    candidates: tuple[str, ...]
    rows: tuple[SensitivityRow, ...]
    skipped: tuple[tuple[str, str, str], ...] = ()

    def rows_for(self, candidate: str) -> tuple[SensitivityRow, ...]:
        """The rows of one candidate, in rank order."""
        if candidate not in self.candidates:
            raise ValueError(
                f"candidate {candidate!r} was not measured; measured: {', '.join(self.candidates)}"
            )
        return tuple(r for r in self.rows if r.candidate == candidate)

    def deltas(self, score: str = "loss") -> dict[str, dict[str, float]]:
        """Per layer per candidate, the input `auto_policy` takes: the loss increase (``loss``), or the
        relative gradient error energy (``gradient``; needs `sensitivity(..., gradients=True)`)."""
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {score!r}")
        out: dict[str, dict[str, float]] = {}
        for r in self.rows:
            if score == "gradient" and r.grad_error is None:
                raise ValueError(
                    "the gradient score needs a table measured with sensitivity(..., gradients=True)"
                )
            out.setdefault(r.layer, {})[r.candidate] = r.delta if score == "loss" else r.grad_error
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "base_loss": self.base_loss,
            "n_batches": self.n_batches,
            "candidates": list(self.candidates),
            "rows": [r.to_dict() for r in self.rows],
            "skipped": [{"layer": n, "candidate": c, "reason": why} for n, c, why in self.skipped],
        }

    def cells(self, limit: int | None = None) -> list[tuple[str, ...]]:
        """String cells per row (columns as in HEADER), e.g. for `rich.table.Table.add_row(*cells)`."""
        out = []
        for i, r in enumerate(self.rows[:limit], start=1):
            sq = f"{r.output_sqnr_db:.2f}" if math.isfinite(r.output_sqnr_db) else "inf"
            gq = "-" if r.grad_sqnr_db is None else f"{r.grad_sqnr_db:.2f}"
            out.append(
                (
                    str(i),
                    r.layer,
                    r.candidate,
                    f"{r.loss:.5f}",
                    f"{r.delta:+.5f}",
                    f"{100 * r.rel_delta:+.3f}%",
                    sq,
                    gq,
                    f"{100 * r.gemm_flops_share:.2f}%",
                )
            )
        return out

    def format(self, limit: int | None = None) -> str:
        """A plain-text table: the base loss, then the first `limit` rows (all when None)."""
        body = [HEADER, *self.cells(limit)]
        widths = [max(len(row[j]) for row in body) for j in range(len(HEADER))]
        lines = [f"base loss {self.base_loss:.5f} over {self.n_batches} batches"]
        for row in body:
            lines.append(
                "  ".join(
                    c.rjust(w) if j != 1 and j != 2 else c.ljust(w)
                    for j, (c, w) in enumerate(zip(row, widths, strict=True))
                ).rstrip()
            )
        return "\n".join(lines)


def _batches(batches: Iterable[Any]) -> list[tuple[Any, torch.Tensor]]:
    try:
        items = list(batches)
    except TypeError:
        raise ValueError(
            f"batches must be an iterable of (inputs, targets), got {type(batches).__name__}"
        ) from None
    if not items:
        raise ValueError("batches is empty: give at least one (inputs, targets) pair")
    for i, b in enumerate(items):
        if not isinstance(b, (tuple, list)) or len(b) != 2:
            raise ValueError(f"batches[{i}] must be an (inputs, targets) pair, got {type(b).__name__}")
    return [(b[0], b[1]) for b in items]


def _candidates(candidates: Sequence[str]) -> tuple[str, ...]:
    if isinstance(candidates, str):
        raise ValueError(f"candidates must be a sequence of recipe names, got the string {candidates!r}")
    cands = tuple(candidates)
    if not cands:
        raise ValueError("candidates is empty: give at least one recipe name")
    for c in cands:
        if c not in RECIPE_NAMES:
            raise ValueError(f"unknown candidate recipe {c!r}; valid: {', '.join(RECIPE_NAMES)}")
    dup = sorted({c for c in cands if cands.count(c) > 1})
    if dup:
        raise ValueError(f"candidates repeat {dup}")
    return cands


def _restore(model: nn.Module, originals: dict[str, nn.Module]) -> None:
    """Put back every original linear module that convert replaced."""
    for name, orig in originals.items():
        if model.get_submodule(name) is not orig:
            replace_module(model, name, orig)


def _decisions(
    model: nn.Module, r: Recipe, pol: ConversionPolicy, originals: dict[str, nn.Module]
) -> tuple[LayerDecision, ...]:
    """What convert would do with `r` under `pol` (the model is restored before returning)."""
    if not r.quantizes:
        # bf16 converts nothing; ask which layers the policy admits with a quantizing recipe of the same
        # high-precision tail, block fit aside (a layer that is not quantized fits any block).
        r = recipe("mxfp8", hp_tail=r.hp_tail)
        pol = replace(pol, require_block_fit=False)
    try:
        return convert(model, r, policy=pol).layers
    finally:
        _restore(model, originals)


def _evaluate(
    model: nn.Module, batches: list[tuple[Any, torch.Tensor]], loss_fn: LossFn, gradients: bool = False
) -> tuple[float, torch.Tensor, torch.Tensor | None]:
    """Mean loss over the batches, the flattened concatenated outputs and, with `gradients`, the
    gradient of the mean loss w.r.t. every parameter from the same forward passes, flattened in name
    order (a converted layer keeps its parameters' names, so two passes' vectors line up)."""
    params = [p for _, p in model.named_parameters() if p.requires_grad] if gradients else []
    for p in params:
        p.grad = None
    losses, outs = [], []
    for x, y in batches:
        with torch.enable_grad() if gradients else contextlib.nullcontext():
            out = model(x)
            if not isinstance(out, torch.Tensor):
                raise ValueError(
                    f"the model's forward must return a tensor of logits, got {type(out).__name__}"
                )
            loss = loss_fn(out, y)
            if gradients:
                (loss / len(batches)).backward()
        losses.append(float(loss))
        outs.append(out.detach().float().reshape(-1))
    grad = None
    if gradients:
        grad = torch.cat(
            [
                (p.grad if p.grad is not None else torch.zeros_like(p)).detach().float().reshape(-1)
                for p in params
            ]
        )
        for p in params:
            p.grad = None
    return sum(losses) / len(losses), torch.cat(outs), grad


def _rank_delta(delta: float) -> float:
    """A NaN loss (the layer broke the model) ranks as the most sensitive."""
    return math.inf if math.isnan(delta) else delta


def sensitivity(
    model: nn.Module,
    batches: Iterable[tuple[Any, torch.Tensor]],
    candidates: Sequence[str] = ("nvfp4", "mxfp8"),
    *,
    loss_fn: LossFn | None = None,
    policy: ConversionPolicy | None = None,
    progress: Callable[[int, int], None] | None = None,
    gradients: bool = False,
) -> SensitivityTable:
    """Quantize each eligible linear layer of `model` alone with each candidate recipe and rank the
    layers by the loss increase on `batches` ((inputs, targets) pairs; `model(inputs)` returns logits).

    `loss_fn(outputs, targets)` defaults to the reference trainer's cross-entropy. The model is left as
    it was (its modules, parameters and train/eval mode). `progress(done, total)` is called after each
    (layer, candidate) measurement, e.g. to advance a progress bar.

    `gradients=True` also runs a backward pass per row (all three GEMMs of the layer quantized, as in
    training) and records the gradient SQNR: the forward-only loss increase misses what quantized
    gradients do to optimisation, which is why NVIDIA keeps the last blocks in BF16. The parameters'
    existing `.grad` are kept.

    >>> from torch import nn
    >>> m = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))
    >>> data = [(torch.randn(8, 32), torch.randint(0, 32, (8,)))]
    >>> t = sensitivity(m, data, candidates=("mxfp8",))
    >>> sorted(r.layer for r in t.rows_for("mxfp8"))
    ['0', '2']
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    cands = _candidates(candidates)
    items = _batches(batches)
    if loss_fn is not None and not callable(loss_fn):
        raise ValueError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
    if progress is not None and not callable(progress):
        raise ValueError(f"progress must be callable, got {type(progress).__name__}")
    if policy is not None and not isinstance(policy, ConversionPolicy):
        raise ValueError(f"policy must be a ConversionPolicy, got {type(policy).__name__}")
    lf = loss_fn or cross_entropy_loss
    pol = policy or DEFAULT_POLICY
    originals = {n: m for n, m in model.named_modules() if n and isinstance(m, nn.Linear)}
    originals.update({n: m for n, m in model.named_modules() if n and type(m).__name__ == "Conv1D"})
    originals.update({n: m for n, m in model.named_modules() if n and is_fused_experts(m)})  # MoE experts

    plan: list[tuple[str, str]] = []
    skipped: list[tuple[str, str, str]] = []
    for c in cands:
        for d in _decisions(model, recipe(c), pol, originals):
            if d.converted:
                plan.append((d.name, c))
            else:
                skipped.append((d.name, c, d.reason))
    if not plan:
        reasons = sorted({f"{n}: {why}" for n, _, why in skipped})[:5]
        raise ValueError(f"no eligible layers for candidates {list(cands)} under the policy; kept: {reasons}")

    flops = linear_flops(model)
    total_flops = sum(flops.values())
    was_training = model.training
    saved_grads = {n: p.grad for n, p in model.named_parameters()} if gradients else {}
    model.eval()
    try:
        with torch.no_grad():  # gradients, when asked, are enabled per forward pass inside _evaluate
            base_loss, base_out, g_ref = _evaluate(model, items, lf, gradients)
            if not math.isfinite(base_loss):
                raise ValueError(f"the unquantized model's loss is not finite ({base_loss}) on these batches")
            rows = []
            for done, (name, c) in enumerate(plan, start=1):
                one = replace(
                    pol, include=(f"^{re.escape(name)}$",), exclude=(), hp_first_blocks=0, hp_last_blocks=0
                )
                try:
                    rep = convert(model, c, policy=one)
                    assert len(rep.converted) == (1 if recipe(c).quantizes else 0), rep.summary()
                    model.eval()
                    loss, out, g = _evaluate(model, items, lf, gradients)
                    g_sqnr = sqnr_db(g_ref, g) if g_ref is not None else None
                finally:
                    _restore(model, originals)
                delta = loss - base_loss
                rel = (
                    delta / base_loss
                    if base_loss != 0
                    else (0.0 if delta == 0 else math.copysign(math.inf, delta))
                )
                rows.append(
                    SensitivityRow(
                        layer=name,
                        candidate=c,
                        loss=loss,
                        delta=delta,
                        rel_delta=rel,
                        output_sqnr_db=sqnr_db(base_out, out),
                        gemm_flops_share=flops.get(name, 0.0) / total_flops if total_flops else 0.0,
                        grad_sqnr_db=g_sqnr,
                    )
                )
                if progress is not None:
                    progress(done, len(plan))
    finally:
        model.train(was_training)
        for n, p in model.named_parameters():
            if n in saved_grads:
                p.grad = saved_grads[n]
    order = {c: i for i, c in enumerate(cands)}
    rows.sort(key=lambda r: (-_rank_delta(r.delta), r.output_sqnr_db, r.layer, order[r.candidate]))
    return SensitivityTable(
        base_loss=base_loss, n_batches=len(items), candidates=cands, rows=tuple(rows), skipped=tuple(skipped)
    )
