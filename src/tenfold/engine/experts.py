"""Mixture-of-experts layers under a recipe: fused 3-D expert weights, per-expert linears, router gates.

Recent Hugging Face transformers (5.x) keep a Mixtral / Qwen3-MoE layer's experts in one module with two 3-D
Parameters, ``gate_up_proj`` (E, 2F, D) and ``down_proj`` (E, D, F), and loop over the experts that received
tokens (the eager path of ``MixtralExperts.forward``; x: (T, D) tokens, E experts, F the expert width):

    gate, up = split(x[tokens of e] · gate_up_proj[e]ᵀ)         (T_e, 2F)
    y_e      = (act(gate) * up) · down_proj[e]ᵀ                   (T_e, D)
    out     += routing weight of (token, e) * y_e                 (index_add over the tokens of e)

`QuantExperts` keeps that loop, routing weights and activation as they are and replaces each expert's two
`F.linear` calls by an `ExpertGemm`: a `QuantLinear` whose weight is the expert's (out, in) slice of the
fused Parameter. Every (expert, projection) pair thus has exactly a dense QuantLinear's semantics: fprop,
dgrad and wgrad quantized along their reduction axes, its own stochastic-rounding seed, its own
delayed-scaling history (`update_scaling(model)` reaches it like any QuantLinear), and an expert given no
tokens is skipped as in the original loop. The wrapped module always runs this eager loop, whatever
``config._experts_implementation`` selects, because it is the semantics being emulated. The fused Parameters
are the original objects under their original names, so optimizers and state_dict keys carry over.

Routers (``mlp.gate``, ``block_sparse_moe.gate``) are recognised by role, the sibling of an ``experts``
module whose output has one logit per expert, so that `convert` keeps them in high precision: DeepSeek-V3
keeps its gating module in BF16/FP32 under FP8 training (DeepSeek-AI, "DeepSeek-V3 Technical Report",
arXiv 2412.19437 §3.3.1, https://arxiv.org/abs/2412.19437).
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from torch import nn

from tenfold.engine.linear import QuantLinear
from tenfold.engine.recipes import Recipe

FUSED_PROJECTIONS = ("gate_up_proj", "down_proj")
ROUTER_NAMES = ("gate", "router")
ROUTER_REASON = (
    "router gate: kept in high precision (routing decisions are sensitive; DeepSeek-V3 keeps its gating "
    "module in BF16/FP32, arXiv 2412.19437 §3.3.1)"
)
EXPERT_LINEAR_PATTERN = re.compile(r"^(.*?(?:^|\.)experts)\.(\d+)\.")


def is_fused_experts(m: nn.Module) -> bool:
    """Whether `m` holds its experts as the 3-D Parameters ``gate_up_proj`` (E, 2F, D) and ``down_proj``
    (E, D, F) (transformers 5.x MoE layers; `QuantExperts` itself excluded)."""
    if isinstance(m, QuantExperts):
        return False
    ps = [getattr(m, p, None) for p in FUSED_PROJECTIONS]
    return all(isinstance(p, nn.Parameter) and p.ndim == 3 for p in ps) and hasattr(m, "act_fn")


def fused_layout_misfit(m: nn.Module) -> str | None:
    """Why `QuantExperts` cannot wrap the fused experts module `m` (a layout it does not emulate), or None."""
    flags = {"is_transposed": False, "has_bias": False, "is_concatenated": True, "has_gate": True}
    for flag, want in flags.items():
        if getattr(m, flag, want) != want:
            return f"fused experts layout {flag}={not want} is not supported by QuantExperts"
    e, two_f, d = m.gate_up_proj.shape
    if m.down_proj.shape != (e, d, two_f // 2) or two_f % 2:
        shapes = f"{tuple(m.gate_up_proj.shape)} / {tuple(m.down_proj.shape)}"
        return f"fused expert shapes {shapes} do not pair up"
    return None


def n_experts(m: nn.Module) -> int | None:
    """How many experts the ``experts`` module `m` holds (a ModuleList of experts or fused 3-D weights)."""
    if isinstance(m, nn.ModuleList):
        return len(m)
    if is_fused_experts(m) or isinstance(m, QuantExperts):
        return int(m.gate_up_proj.shape[0])
    return None


def router_names(model: nn.Module) -> set[str]:
    """Qualified names of the router gates in `model`: a child named gate or router of a module that also
    has an ``experts`` child, with a 2-D weight of one row per expert (recognised by role, not class)."""
    out = set()
    for name, parent in model.named_modules():
        experts = getattr(parent, "experts", None)
        count = n_experts(experts) if isinstance(experts, nn.Module) else None
        if count is None:
            continue
        for child in ROUTER_NAMES:
            g = getattr(parent, child, None)
            w = getattr(g, "weight", None)
            is_2d = isinstance(w, torch.Tensor) and w.ndim == 2
            if isinstance(g, nn.Module) and is_2d and w.shape[0] == count:
                out.add(f"{name}.{child}" if name else child)
    return out


def expert_linear(name: str) -> tuple[str, int] | None:
    """(MoE layer, expert index) of a per-expert linear such as ``...experts.3.w1``, else None."""
    mt = EXPERT_LINEAR_PATTERN.match(name)
    return (mt.group(1), int(mt.group(2))) if mt else None


class ExpertGemm(QuantLinear):
    """One expert's projection with a QuantLinear's GEMMs and state; its weight is the expert's (out, in)
    slice of the owner's fused 3-D Parameter (a view, so gradients land in that Parameter)."""

    def __init__(
        self,
        owner: nn.Module,
        param: str,
        expert: int,
        recipe: Recipe,
        *,
        seed: int,
        backend: str = "auto",
        quant_backend: str = "auto",
    ) -> None:
        nn.Module.__init__(self)
        # a plain reference, not a submodule: the owner holds this module, not vice versa
        object.__setattr__(self, "_owner", owner)
        self.param = param
        self.expert = expert
        self.out_features, self.in_features = (int(v) for v in getattr(owner, param).shape[1:])
        self.bias = None
        self._setup(recipe, seed, backend, quant_backend)

    @property
    def weight(self) -> torch.Tensor:  # type: ignore[override]
        return getattr(self._owner, self.param)[self.expert]

    def reset_parameters(self) -> None:
        """The weight belongs to the fused Parameter: only the quantization state is reset."""
        self.reset_quant_state()

    def extra_repr(self) -> str:
        return f"{self.param}[{self.expert}], " + super().extra_repr()


class QuantExperts(nn.Module):
    """A fused MoE experts module (see the module docstring) with per-expert quantized GEMMs.

    Build it with `QuantExperts.wrap(experts, recipe, ...)`; `projections` names the fused Parameters whose
    GEMMs are quantized (the others stay high precision until `quantize` adds them, possibly with another
    recipe). Seeds run seed, seed + 1, ... over the quantized (projection, expert) pairs in the order of
    `projections`; `n_gemms` counts the expert GEMMs quantized.
    """

    gemms: nn.ModuleDict

    @classmethod
    def wrap(
        cls,
        experts: nn.Module,
        recipe: Recipe,
        *,
        projections: tuple[str, ...] = FUSED_PROJECTIONS,
        seed: int = 0,
        backend: str = "auto",
        quant_backend: str = "auto",
    ) -> QuantExperts:
        """A QuantExperts sharing `experts`' Parameters and activation (the original is left untouched)."""
        if not is_fused_experts(experts):
            raise ValueError(f"{type(experts).__name__} has no fused 3-D gate_up_proj/down_proj experts")
        why = fused_layout_misfit(experts)
        if why is not None:
            raise ValueError(why)
        m = cls()
        m.gate_up_proj = experts.gate_up_proj
        m.down_proj = experts.down_proj
        m.act_fn = experts.act_fn
        m.num_experts = int(experts.gate_up_proj.shape[0])
        m.config = getattr(experts, "config", None)
        m.gemms = nn.ModuleDict()
        m.n_gemms = 0
        for p in projections:
            m.quantize(p, recipe, seed=seed + m.n_gemms, backend=backend, quant_backend=quant_backend)
        return m

    def quantize(
        self,
        projection: str,
        recipe: Recipe,
        *,
        seed: int,
        backend: str = "auto",
        quant_backend: str = "auto",
    ) -> int:
        """Quantize `projection` (gate_up_proj or down_proj) of every expert with `recipe`, expert e getting
        seed `seed + e`; returns the number of seeds used (num_experts)."""
        if projection not in FUSED_PROJECTIONS:
            raise ValueError(f"projection {projection!r} is not one of {FUSED_PROJECTIONS}")
        if projection in self.gemms:
            raise ValueError(f"{projection} is already quantized")
        opts = {"backend": backend, "quant_backend": quant_backend}
        self.gemms[projection] = nn.ModuleList(
            ExpertGemm(self, projection, e, recipe, seed=seed + e, **opts) for e in range(self.num_experts)
        )
        self.n_gemms += self.num_experts
        return self.num_experts

    def _project(self, param: str, expert: int, x: torch.Tensor) -> torch.Tensor:
        if param in self.gemms:
            return self.gemms[param][expert](x)
        return F.linear(x, getattr(self, param)[expert])

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        """hidden_states (T, D), top_k_index and top_k_weights (T, k) from the router -> (T, D).

        The eager loop of the transformers experts modules; index num_experts marks a dropped token."""
        out = torch.zeros_like(hidden_states)
        with torch.no_grad():
            mask = F.one_hot(top_k_index, num_classes=self.num_experts + 1).permute(2, 1, 0)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for row in hit:
            e = int(row[0])
            if e == self.num_experts:
                continue
            pos, tok = torch.where(mask[e])
            gate, up = self._project("gate_up_proj", e, hidden_states[tok]).chunk(2, dim=-1)
            y = self._project("down_proj", e, self.act_fn(gate) * up)
            y = y * top_k_weights[tok, pos, None]
            out.index_add_(0, tok, y.to(out.dtype))
        return out

    def extra_repr(self) -> str:
        return f"num_experts={self.num_experts}, quantized={list(self.gemms.keys())}"
