"""Parallel layouts and the structural rules a layout must satisfy before anything is costed.

GPUs = TP x PP x DP x CP (Megatron-LM's decomposition; expert parallelism is carved out of TP x CP x DP for
the MoE layers, Megatron-Core "parallel folding"). Each rule is written once as a vectorised mask plus a
message that prints the numbers, so the scalar estimate and the grid search agree on what is invalid and why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tenfold.perf.specs.models import ModelSpec

RECOMPUTE = ("none", "selective", "full")
"""Activation recomputation modes (Korthikanti et al. 2022, https://arxiv.org/abs/2205.05198 §5): nothing, the
attention core only, or the whole layer. A mode's code (what a PlanGrid stores) is its index here."""
RECOMPUTE_CODE = {name: code for code, name in enumerate(RECOMPUTE)}
RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL = (RECOMPUTE_CODE[k] for k in RECOMPUTE)
ZERO_STAGES = (0, 1, 2, 3)
"""ZeRO stages (Rajbhandari et al. 2020, https://arxiv.org/abs/1910.02054); 3 shards the weights (FSDP)."""
RULE_FIELDS = ("tp", "pp", "vp", "dp", "cp", "ep", "micro_batch")
"""The layout fields the structural rules read."""


def divisors(n: int) -> list[int]:
    """Every divisor of `n` >= 1, ascending: the degrees a parallel dimension can take on `n` GPUs."""
    if n < 1:
        raise ValueError(f"divisors needs n >= 1, got {n}")
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True, kw_only=True)
class Layout:
    """One parallel plan. Fields:
    tp, pp, dp, cp: tensor, pipeline, data, context parallel degrees (GPUs = tp·pp·dp·cp).
    ep: expert-parallel degree of the MoE layers (divides tp·cp·dp); etp: expert tensor parallelism
        (only 1 is modelled).
    vp: virtual pipeline stages (interleaved 1F1B chunks per GPU).
    sp: sequence parallelism (None: on whenever tp > 1).
    micro_batch: sequences per micro-batch.
    recompute: "none", "selective" (attention core) or "full" activation recomputation.
    recompute_layers: with full recomputation, how many layers per pipeline stage are recomputed
        (Megatron `recompute_num_layers` with the block method); None = all.
    zero: ZeRO stage 0-3 over the data-parallel group (3 = FSDP); None: the software stack's default.
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    vp: int = 1
    sp: bool | None = None
    micro_batch: int = 1
    recompute: str = "none"
    recompute_layers: int | None = None
    zero: int | None = None

    def __post_init__(self) -> None:
        for key in ("tp", "pp", "dp", "cp", "ep", "etp", "vp", "micro_batch"):
            v = getattr(self, key)
            if not isinstance(v, int | np.integer) or v < 1:
                raise ValueError(f"{key} must be an integer >= 1, got {v!r}")
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"recompute must be one of {RECOMPUTE}, got {self.recompute!r}")
        if self.recompute_layers is not None and (self.recompute != "full" or self.recompute_layers < 0):
            raise ValueError(f"recompute_layers={self.recompute_layers} needs recompute='full' and >= 0")
        if self.zero is not None and self.zero not in ZERO_STAGES:
            raise ValueError(f"zero must be 0, 1, 2 or 3, got {self.zero!r}")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def sequence_parallel(self) -> bool:
        return self.tp > 1 if self.sp is None else bool(self.sp)

    def describe(self) -> str:
        parts = [f"TP{self.tp}", f"PP{self.pp}"] + ([f"VP{self.vp}"] if self.vp > 1 else [])
        parts += (
            [f"DP{self.dp}"]
            + ([f"CP{self.cp}"] if self.cp > 1 else [])
            + ([f"EP{self.ep}"] if self.ep > 1 else [])
        )
        parts += [f"mb{self.micro_batch}", self.recompute] + (
            [f"ZeRO-{self.zero}"] if self.zero is not None else []
        )
        return " ".join(parts)


@dataclass(frozen=True)
class Rule:
    """A structural rule: `bad(model, seq_len, global_batch, x)` -> bool mask of violations, where x maps
    RULE_FIELDS to arrays (or scalars); `message(model, seq_len, global_batch, x)` -> the reason for one
    violating plan (x of scalars)."""

    key: str
    bad: Callable[..., np.ndarray]
    message: Callable[..., str]


def _ffn_widths(model: ModelSpec) -> list[int]:
    """FFN widths that tensor parallelism splits (dense MLP, shared experts)."""
    widths = []
    if model.n_dense_layers:
        widths.append(model.ffn)
    if model.is_moe and model.shared_experts:
        widths.append(model.shared_experts * model.moe_ffn)
    return widths


def _tp_splits_ffn(model: ModelSpec, tp: np.ndarray) -> np.ndarray:
    bad = np.zeros(np.shape(tp), dtype=bool)
    for w in _ffn_widths(model):
        bad |= w % tp != 0
    return bad


RULES: tuple[Rule, ...] = (
    Rule(
        "tp_heads",
        lambda m, s, g, x: m.heads % x["tp"] != 0,
        lambda m, s, g, x: f"TP={x['tp']} does not divide {m.heads} heads",
    ),
    Rule(
        "tp_kv_heads",
        lambda m, s, g, x: (m.kv_heads % x["tp"] != 0) & (x["tp"] <= m.heads) & (not m.is_mla),
        lambda m, s, g, x: f"TP={x['tp']} does not divide {m.kv_heads} KV heads",
    ),
    Rule(
        "tp_ffn",
        lambda m, s, g, x: _tp_splits_ffn(m, x["tp"]),
        lambda m, s, g, x: (
            f"TP={x['tp']} does not divide the FFN width ({', '.join(map(str, _ffn_widths(m)))})"
        ),
    ),
    Rule(
        "pp_layers",
        lambda m, s, g, x: x["pp"] * x["vp"] > m.layers,
        lambda m, s, g, x: (
            f"PP={x['pp']} x VP={x['vp']} = {x['pp'] * x['vp']} chunks exceed {m.layers} layers"
        ),
    ),
    Rule(
        "vp_needs_pp",
        lambda m, s, g, x: (x["vp"] > 1) & (x["pp"] == 1),
        lambda m, s, g, x: f"VP={x['vp']} needs PP > 1",
    ),
    Rule(
        "ep_dense",
        lambda m, s, g, x: (x["ep"] > 1) & (not m.is_moe),
        lambda m, s, g, x: f"EP={x['ep']} on a dense model",
    ),
    Rule(
        "ep_experts",
        lambda m, s, g, x: m.is_moe & (np.maximum(m.experts, 1) % x["ep"] != 0),
        lambda m, s, g, x: f"EP={x['ep']} does not divide {m.experts} experts",
    ),
    Rule(
        "ep_fold",
        lambda m, s, g, x: (x["tp"] * x["cp"] * x["dp"]) % x["ep"] != 0,
        lambda m, s, g, x: f"EP={x['ep']} does not divide TP·CP·DP = {x['tp'] * x['cp'] * x['dp']}",
    ),
    Rule(
        "cp_seq",
        lambda m, s, g, x: (x["cp"] > 1) & (s % (2 * x["cp"]) != 0),
        lambda m, s, g, x: f"CP={x['cp']} needs the sequence length ({s}) divisible by 2·CP = {2 * x['cp']}",
    ),
    Rule(
        "batch",
        lambda m, s, g, x: g % (x["dp"] * x["micro_batch"]) != 0,
        lambda m, s, g, x: (
            f"global batch {g} is not a multiple of DP x micro-batch = {x['dp']} x {x['micro_batch']}"
        ),
    ),
)


def broken_rules(model: ModelSpec, layout: Layout, *, seq_len: int, global_batch: int) -> list[Rule]:
    """The structural rules `layout` breaks, in RULES order (empty if none)."""
    x = {k: np.asarray(getattr(layout, k)) for k in RULE_FIELDS}
    return [r for r in RULES if bool(np.asarray(r.bad(model, seq_len, global_batch, x)))]


def layout_problems(model: ModelSpec, layout: Layout, *, seq_len: int, global_batch: int) -> list[str]:
    """Every structural rule `layout` breaks, as readable reasons (empty if none)."""
    x = {k: getattr(layout, k) for k in RULE_FIELDS}
    out = [
        r.message(model, seq_len, global_batch, x)
        for r in broken_rules(model, layout, seq_len=seq_len, global_batch=global_batch)
    ]
    if layout.etp != 1:
        out.append(f"ETP={layout.etp}: expert tensor parallelism other than 1 is not modelled")
    return out
