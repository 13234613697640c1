"""`convert(model, recipe)`: swap a model's linear layers for `QuantLinear` in place, and say what happened.

Candidates are `nn.Linear` modules and Hugging Face `Conv1D` modules (GPT-2 style, recognised by class
name and their (in, out) weight, so transformers need not be imported). A candidate stays in high
precision, with the reason recorded, when:

* its qualified name misses every `include` pattern, or hits an `exclude` pattern (by default the LM head,
  which NVIDIA's FP8 and NVFP4 recipes keep in BF16: NVIDIA, "Pretraining Large Language Models with NVFP4",
  arXiv 2509.25149 §4.1, https://arxiv.org/abs/2509.25149);
* it sits in one of the first `hp_first_blocks` or last `hp_last_blocks` transformer blocks (block index
  parsed from the name with `block_pattern`; by default the tail is ceil(recipe.hp_tail x n_blocks));
* its shape does not fit the recipe's blocks along a reduction dimension (with `require_block_fit`):
  the emulation pads, but the hardware kernels want whole blocks.

Mixture-of-experts layers (see `experts.py`):

* router gates (``mlp.gate`` in Qwen3-MoE and Mixtral, ``block_sparse_moe.gate`` in older Mixtral code),
  recognised by role (a ``gate``/``router`` child of a module that also holds ``experts``, with one output
  per expert), stay in high precision by default (`keep_routers`): DeepSeek-V3 keeps its gating module in
  BF16/FP32 under FP8 training (arXiv 2412.19437 §3.3.1, https://arxiv.org/abs/2412.19437);
* per-expert ``nn.Linear`` experts (``experts.N.w1``) convert like any linear layer and are counted;
* fused 3-D experts (transformers 5.x ``gate_up_proj`` (E, 2F, D) / ``down_proj`` (E, D, F)) give one
  decision per Parameter (kind ``Experts``, named ``...experts.gate_up_proj``) and are wrapped in a
  `QuantExperts` that runs every expert's GEMMs as a QuantLinear would.

`ConversionReport.experts` counts the expert GEMM weights quantized and `moe_layers` names their MoE layers.
Hugging Face models (Llama, Qwen3, Qwen3-MoE, Mixtral) need nothing else: their blocks are ``model.layers.N``,
which the default block pattern finds, so a recipe's high-precision tail applies.

The parameters are shared with the original modules, so an optimizer built before `convert` still works,
and their state_dict keys are unchanged (quantization buffers are added next to them).
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from torch import nn

from tenfold.engine.autoprecision.policy import PrecisionPolicy
from tenfold.engine.backend import GEMM_BACKENDS
from tenfold.engine.experts import (
    FUSED_PROJECTIONS,
    ROUTER_REASON,
    QuantExperts,
    expert_linear,
    fused_layout_misfit,
    is_fused_experts,
    router_names,
)
from tenfold.engine.linear import QuantConv1D, QuantLinear
from tenfold.engine.recipes import Recipe
from tenfold.engine.recipes import recipe as build_recipe
from tenfold.formats.fake import QUANT_PATHS
from tenfold.formats.scheme import Family

DEFAULT_BLOCK_PATTERN = r"(?:^|\.)(?:blocks|layers|layer|h)\.(\d+)(?:\.|$)"
LM_HEAD_PATTERN = r"(^|\.)lm_head$"
LM_HEAD_REASON = (
    "LM head: kept in high precision (NVIDIA's FP8 and NVFP4 recipes keep it in BF16, arXiv 2509.25149 §4.1)"
)


@dataclass(frozen=True, kw_only=True)
class ConversionPolicy:
    """Which linear layers `convert` quantizes.

    Fields:
        include: regexes (re.search on qualified names); when non-empty only matching layers convert.
        exclude: regexes of layers kept in high precision (default: the LM head).
        keep_routers: keep MoE router gates in high precision (recognised by role; see `experts.py`).
        hp_first_blocks: number of leading transformer blocks kept in high precision.
        hp_last_blocks: number of trailing blocks kept in high precision; None = ceil(recipe.hp_tail x n).
        block_pattern: regex whose group 1 is the block index in a layer's qualified name.
        require_block_fit: keep layers whose reduction dims are not whole blocks in high precision.
        backend: GEMM backend for converted layers: auto | emulated | native.
        quant_backend: how emulated operands are quantized: auto | eager | compiled | reference.
    """

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = (LM_HEAD_PATTERN,)
    keep_routers: bool = True
    hp_first_blocks: int = 0
    hp_last_blocks: int | None = None
    block_pattern: str = DEFAULT_BLOCK_PATTERN
    require_block_fit: bool = True
    backend: str = "auto"
    quant_backend: str = "auto"

    def __post_init__(self) -> None:
        for fld in ("include", "exclude"):
            pats = getattr(self, fld)
            if isinstance(pats, str):
                raise ValueError(f"{fld} must be a tuple of regexes, got the string {pats!r}")
            for p in pats:
                try:
                    re.compile(p)
                except re.error as err:
                    raise ValueError(f"{fld}: bad regex {p!r}: {err}") from None
        try:
            if re.compile(self.block_pattern).groups < 1:
                raise ValueError(f"block_pattern {self.block_pattern!r} needs a group for the block index")
        except re.error as err:
            raise ValueError(f"block_pattern: bad regex {self.block_pattern!r}: {err}") from None
        if self.hp_first_blocks < 0:
            raise ValueError(f"hp_first_blocks must be >= 0, got {self.hp_first_blocks}")
        if self.hp_last_blocks is not None and self.hp_last_blocks < 0:
            raise ValueError(f"hp_last_blocks must be >= 0 or None, got {self.hp_last_blocks}")
        if self.backend not in GEMM_BACKENDS:
            raise ValueError(f"backend {self.backend!r} is not one of: {', '.join(GEMM_BACKENDS)}")
        if self.quant_backend not in QUANT_PATHS:
            raise ValueError(f"quant_backend {self.quant_backend!r} is not one of: {', '.join(QUANT_PATHS)}")


@dataclass(frozen=True, kw_only=True)
class LayerDecision:
    """What `convert` did with one candidate layer.

    Fields:
        name: qualified module name.
        kind: Linear or Conv1D.
        in_features, out_features: the layer's shape.
        block: transformer block index parsed from the name, or None.
        converted: True when swapped for a QuantLinear.
        reason: why it was converted or kept.
        backend: the converted layer's GEMM backend and its reason, else None.
        experts: how many expert GEMM weights it holds (1 for a per-expert linear, E for a fused 3-D
            expert Parameter, 0 for a dense layer).
        moe_layer: qualified name of the MoE experts module it belongs to, else None.
    """

    name: str
    kind: str
    in_features: int
    out_features: int
    block: int | None
    converted: bool
    reason: str
    backend: str | None = None
    experts: int = 0
    moe_layer: str | None = None


@dataclass(frozen=True, kw_only=True)
class ConversionReport:
    """The outcome of `convert`: every candidate layer with its decision.

    Fields:
        recipe: recipe name.
        n_blocks: number of transformer blocks found with the policy's block pattern.
        hp_blocks: indices of blocks kept in high precision.
        layers: one decision per candidate, in module order.
        already_quantized: layers that were QuantLinear before this call (left as they are).
    """

    recipe: str
    n_blocks: int
    hp_blocks: tuple[int, ...]
    layers: tuple[LayerDecision, ...]
    already_quantized: tuple[str, ...] = ()

    @property
    def converted(self) -> tuple[LayerDecision, ...]:
        return tuple(d for d in self.layers if d.converted)

    @property
    def kept(self) -> tuple[LayerDecision, ...]:
        return tuple(d for d in self.layers if not d.converted)

    @property
    def experts(self) -> int:
        """Number of expert GEMM weights quantized (one per expert and projection)."""
        return sum(d.experts for d in self.converted)

    @property
    def moe_layers(self) -> tuple[str, ...]:
        """The MoE experts modules with at least one quantized expert GEMM weight."""
        return tuple(sorted({d.moe_layer for d in self.converted if d.moe_layer is not None}))

    def to_dict(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "n_blocks": self.n_blocks,
            "hp_blocks": list(self.hp_blocks),
            "converted": len(self.converted),
            "kept": len(self.kept),
            "experts": self.experts,
            "moe_layers": list(self.moe_layers),
            "already_quantized": list(self.already_quantized),
            "layers": [asdict(d) for d in self.layers],
        }

    def summary(self) -> str:
        lines = [
            f"recipe {self.recipe}: {len(self.converted)} layers converted, {len(self.kept)} kept in high "
            f"precision ({self.n_blocks} blocks; high-precision blocks: {list(self.hp_blocks) or 'none'})"
        ]
        if self.experts:
            n_moe = len(self.moe_layers)
            lines.append(f"  {self.experts} expert GEMM weights in {n_moe} MoE layers quantized")
        if self.already_quantized:
            lines.append(f"  {_already_note(self.already_quantized)}")
        lines += [f"  kept {d.name}: {d.reason}" for d in self.kept]
        return "\n".join(lines)


def _already_note(names: tuple[str, ...]) -> str:
    return (
        f"{len(names)} layers were already quantized (convert() was called on this model before) "
        "and are left as they are"
    )


def is_conv1d(m: nn.Module) -> bool:
    """Whether `m` is a Hugging Face GPT-2 style `Conv1D` (weight (in, out), y = x·W + b), recognised by
    class name and shape so that transformers need not be imported."""
    w = getattr(m, "weight", None)
    return type(m).__name__ == "Conv1D" and hasattr(m, "nf") and w is not None and w.ndim == 2


@dataclass(frozen=True)
class _Candidate:
    """A layer `convert` decides on: a linear (Linear, Conv1D), a router gate, or one fused expert Parameter
    (kind Experts, named ``<experts module>.<parameter>``, module = the experts module)."""

    name: str
    module: nn.Module
    kind: str
    in_features: int
    out_features: int
    router: bool = False
    experts: int = 0
    moe_layer: str | None = None


def _candidates(model: nn.Module) -> list[_Candidate]:
    routers = router_names(model)
    out = []
    for name, m in model.named_modules():
        if isinstance(m, QuantLinear):
            continue
        moe = expert_linear(name)
        per_expert = {"experts": 1, "moe_layer": moe[0]} if moe else {}
        if isinstance(m, nn.Linear):
            shape = (m.in_features, m.out_features)
            out.append(_Candidate(name, m, "Linear", *shape, name in routers, **per_expert))
        elif is_conv1d(m):
            out.append(_Candidate(name, m, "Conv1D", *m.weight.shape, name in routers, **per_expert))
        elif name in routers:
            out.append(_Candidate(name, m, "Router", m.weight.shape[1], m.weight.shape[0], True))
        elif is_fused_experts(m) or isinstance(m, QuantExperts):  # a QuantExperts offers what it keeps
            for p in FUSED_PROJECTIONS:
                if isinstance(m, QuantExperts) and p in m.gemms:
                    continue
                e, fout, fin = getattr(m, p).shape
                out.append(_Candidate(f"{name}.{p}", m, "Experts", fin, fout, experts=e, moe_layer=name))
    return out


def _block_misfit(r: Recipe, in_features: int, out_features: int) -> str | None:
    """Why an (out, in) layer does not fit the recipe's blocks along its reduction dims, or None."""
    checks = (("fprop", "in_features", in_features), ("dgrad", "out_features", out_features))
    for gemm, dim_name, dim in checks:
        for side in ("a", "b"):
            s = r.operand(gemm, side)
            if s is None or s.family in (Family.TENSOR, Family.ROW):
                continue
            k = s.block[1]
            if dim % k:
                return f"{dim_name}={dim} is not a multiple of the {s.name} block ({k}) in {gemm}"
        w = r.operand(gemm, "b")
        if w is not None and w.is_2d:
            rows = w.block[0]
            other = out_features if gemm == "fprop" else in_features
            if other % rows:
                return f"weight dim {other} is not a multiple of the {w.name} 2-D block ({rows})"
    return None


def convert(
    model: nn.Module,
    recipe: Recipe | str | Path | PrecisionPolicy,
    *,
    policy: ConversionPolicy | None = None,
    seed: int | None = None,
) -> ConversionReport:
    """Swap `model`'s linear layers for QuantLinear per `recipe` and `policy`, in place.

    `recipe` may also be a per-layer `PrecisionPolicy` or the path of its TOML file (`tenfold policy`
    writes one): each listed layer gets its own format; unlisted and bf16 layers stay high precision.
    `seed` replaces the seed of recipes built from a name or a policy (stochastic-rounding noise), so
    that a policy run and a recipe run of the same seed draw the same noise; a `Recipe` keeps its own.

    >>> from torch import nn
    >>> m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
    >>> convert(m, "mxfp8").to_dict()["converted"]
    2
    """
    already = tuple(n for n, m in model.named_modules() if isinstance(m, QuantLinear))
    if already:
        warnings.warn(_already_note(already), stacklevel=2)
    return replace(_convert(model, recipe, policy, seed), already_quantized=already)


def _convert(
    model: nn.Module,
    recipe: Recipe | str | Path | PrecisionPolicy,
    policy: ConversionPolicy | None,
    seed: int | None = None,
) -> ConversionReport:
    if isinstance(recipe, Path) or (isinstance(recipe, str) and recipe.endswith(".toml")):
        recipe = PrecisionPolicy.load(recipe)
    if isinstance(recipe, PrecisionPolicy):
        return _convert_per_layer(model, recipe, policy or ConversionPolicy(), seed)
    if isinstance(recipe, str):
        r = build_recipe(recipe) if seed is None else build_recipe(recipe, seed=seed)
    else:
        r = recipe
    if not isinstance(r, Recipe):
        raise ValueError(f"recipe must be a Recipe or a recipe name, got {type(recipe).__name__}")
    pol = policy or ConversionPolicy()
    block_re = re.compile(pol.block_pattern)
    cands = _candidates(model)
    blocks = {}
    for c in cands:
        mt = block_re.search(c.name)
        blocks[c.name] = int(mt.group(1)) if mt else None
    indices = sorted({b for b in blocks.values() if b is not None})
    n_blocks = indices[-1] + 1 if indices else 0
    n_last = pol.hp_last_blocks if pol.hp_last_blocks is not None else math.ceil(r.hp_tail * n_blocks - 1e-9)
    hp = set(range(min(pol.hp_first_blocks, n_blocks))) | set(range(max(n_blocks - n_last, 0), n_blocks))

    decisions: dict[str, LayerDecision] = {}
    fused: dict[str, list[_Candidate]] = {}  # experts module name -> its projections to quantize
    seed_index = 0
    for c in cands:
        common = {
            "name": c.name,
            "kind": c.kind,
            "in_features": c.in_features,
            "out_features": c.out_features,
        }
        common |= {"block": blocks[c.name], "experts": c.experts, "moe_layer": c.moe_layer}
        reason = _keep_reason(c, r, pol, blocks[c.name], hp)
        if reason is not None:
            decisions[c.name] = LayerDecision(**common, converted=False, reason=reason)
            continue
        if c.kind == "Experts":  # wrapped below, once per experts module; seeds: one per expert
            fused.setdefault(c.moe_layer or "", []).append(c)
            decisions[c.name] = LayerDecision(**common, converted=True, reason=f"quantized with {r.name}")
            continue
        cls = QuantConv1D if c.kind == "Conv1D" else QuantLinear
        seed = r.seed * (1 << 20) + seed_index
        q = cls.from_linear(c.module, r, seed=seed, backend=pol.backend, quant_backend=pol.quant_backend)
        seed_index += 1
        replace_module(model, c.name, q)
        decisions[c.name] = LayerDecision(
            **common,
            converted=True,
            reason=f"quantized with {r.name}",
            backend=f"{q.backend_choice.backend}: {q.backend_choice.reason}",
        )
    for mod_name, parts in fused.items():
        qe = parts[0].module
        if not isinstance(qe, QuantExperts):
            qe = QuantExperts.wrap(qe, r, projections=())
            replace_module(model, mod_name, qe)
        for c in parts:
            p = c.name.rpartition(".")[2]
            seed = r.seed * (1 << 20) + seed_index
            seed_index += qe.quantize(p, r, seed=seed, backend=pol.backend, quant_backend=pol.quant_backend)
            choice = qe.gemms[p][0].backend_choice
            decisions[c.name] = replace(decisions[c.name], backend=f"{choice.backend}: {choice.reason}")
    return ConversionReport(
        recipe=r.name, n_blocks=n_blocks, hp_blocks=tuple(sorted(hp)), layers=tuple(decisions.values())
    )


def _keep_reason(
    c: _Candidate, r: Recipe, pol: ConversionPolicy, blk: int | None, hp: set[int]
) -> str | None:
    """Why candidate `c` stays in high precision under `r` and `pol`, or None when it is quantized."""
    if not r.quantizes:
        return f"recipe {r.name} quantizes nothing"
    if pol.include and not any(re.search(p, c.name) for p in pol.include):
        return "matches no include pattern"
    if c.router and pol.keep_routers:
        return ROUTER_REASON
    if c.kind == "Router":
        return "router gate is not a linear layer (kept in high precision)"
    pat = next((p for p in pol.exclude if re.search(p, c.name)), None)
    if pat is not None:
        why = f"{LM_HEAD_REASON}; " if pat == LM_HEAD_PATTERN else ""
        return f"{why}excluded by pattern {pat!r}"
    if blk is not None and blk in hp:
        where = "first" if blk < pol.hp_first_blocks else "last"
        return f"block {blk} is kept in high precision ({where} blocks)"
    if c.kind == "Experts":
        why = fused_layout_misfit(c.module)
        if why is not None:
            return why
    if pol.require_block_fit:
        return _block_misfit(r, c.in_features, c.out_features)
    return None


def _convert_per_layer(
    model: nn.Module, pp: PrecisionPolicy, pol: ConversionPolicy, seed: int | None
) -> ConversionReport:
    """One `convert` pass per format over exactly the layers the policy gives it, then one report."""
    cands = _candidates(model)
    unknown = sorted(set(pp.layers) - {c.name for c in cands})
    if unknown:
        raise ValueError(f"policy names layers the model does not have: {unknown[:5]}")
    done: dict[str, LayerDecision] = {}
    for fmt in sorted({f for f in pp.layers.values() if f != "bf16"}):
        mine = tuple(f"^{re.escape(n)}$" for n, f in pp.layers.items() if f == fmt)
        one = replace(pol, include=mine, exclude=(), hp_first_blocks=0, hp_last_blocks=0)
        rep = _convert(model, fmt, one, seed)
        done.update({d.name: d for d in rep.layers if pp.layers.get(d.name) == fmt})
    decisions = []
    for c in cands:
        if c.name in done:
            decisions.append(done[c.name])
            continue
        why = "the policy keeps it in bf16" if pp.layers.get(c.name) == "bf16" else "not in the policy"
        decisions.append(
            LayerDecision(
                name=c.name,
                kind=c.kind,
                in_features=c.in_features,
                out_features=c.out_features,
                block=None,
                converted=False,
                reason=why,
                experts=c.experts,
                moe_layer=c.moe_layer,
            )
        )
    return ConversionReport(recipe="policy", n_blocks=0, hp_blocks=(), layers=tuple(decisions))


def replace_module(model: nn.Module, name: str, new: nn.Module) -> None:
    """Put `new` in `model` at the qualified name `name` (in place of the module there)."""
    if not name:
        raise ValueError("convert() cannot replace the root module itself; wrap it in a container")
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, new)
