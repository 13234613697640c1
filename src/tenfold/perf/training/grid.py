"""Many training plans at once: `PlanGrid`, one array element per plan, and the grid the search enumerates.

The array kernels (`step.plan_times`, `memory.plan_memory`) take a PlanGrid, so the search (hundreds of
thousands of plans), the validation (a published run's candidate layouts) and the single estimate (one plan)
run the same code. `PlanGrid.from_layouts` and `PlanGrid.layout` convert between it and `Layout`s.

The search's grid is every (tp, pp, cp) whose product divides the GPU count (dp is the rest), with tp capped
by the head count, pp by the layer count and cp by the sequence length, crossed with vp x ep x micro-batch x
recompute x ZeRO stage. `search_chunks` builds it one (tp, pp, cp) at a time; `count_plans` counts it
without building it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

import numpy as np

from tenfold.perf.specs.models import ModelSpec, load_model
from tenfold.perf.training.layout import (
    RECOMPUTE,
    RECOMPUTE_CODE,
    RULE_FIELDS,
    ZERO_STAGES,
    Layout,
    divisors,
    rules_for,
)
from tenfold.perf.training.stack import Stack, stack

MICRO_BATCHES = (1, 2, 4, 8, 16)
"""Micro-batch sizes (sequences) the search tries by default."""
RECOMPUTES = RECOMPUTE
"""Recomputation modes the search tries by default: all of them."""


@dataclass(frozen=True, kw_only=True)
class PlanGrid:
    """Training plans as a struct of arrays: element j of every field describes plan j (see `Layout`).

    Fields (1-D arrays of one length):
        tp, pp, vp, dp, cp, ep: parallel degrees (integers).
        micro_batch: sequences per micro-batch.
        sequence_parallel: bool, sequence parallelism on.
        recompute: recomputation mode code, an index into layout.RECOMPUTE.
        recompute_layers: with full recomputation, layers recomputed per pipeline stage (float; NaN = all).
        zero: ZeRO stage 0-3 (already resolved: no "software default" here).
    """

    tp: np.ndarray
    pp: np.ndarray
    vp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    micro_batch: np.ndarray
    sequence_parallel: np.ndarray
    recompute: np.ndarray
    recompute_layers: np.ndarray
    zero: np.ndarray

    def __post_init__(self) -> None:
        n = np.shape(self.tp)
        for f in fields(self):
            if np.shape(getattr(self, f.name)) != n or len(n) != 1:
                raise ValueError(f"PlanGrid.{f.name} has shape {np.shape(getattr(self, f.name))}, tp has {n}")

    def __len__(self) -> int:
        return len(self.tp)

    @classmethod
    def from_layouts(cls, layouts: Sequence[Layout], *, default_zero: int) -> PlanGrid:
        """The grid of `layouts`; a layout without a ZeRO stage gets `default_zero` (the software's)."""
        return cls(
            tp=np.array([x.tp for x in layouts]),
            pp=np.array([x.pp for x in layouts]),
            vp=np.array([x.vp for x in layouts]),
            dp=np.array([x.dp for x in layouts]),
            cp=np.array([x.cp for x in layouts]),
            ep=np.array([x.ep for x in layouts]),
            micro_batch=np.array([x.micro_batch for x in layouts]),
            sequence_parallel=np.array([x.sequence_parallel for x in layouts], dtype=bool),
            recompute=np.array([RECOMPUTE_CODE[x.recompute] for x in layouts]),
            recompute_layers=np.array(
                [np.nan if x.recompute_layers is None else x.recompute_layers for x in layouts], dtype=float
            ),
            zero=np.array([default_zero if x.zero is None else x.zero for x in layouts]),
        )

    def layout(self, j: int) -> Layout:
        """Plan j as a `Layout` (sequence parallelism and ZeRO stage explicit)."""
        rl = float(self.recompute_layers[j])
        return Layout(
            tp=int(self.tp[j]),
            pp=int(self.pp[j]),
            dp=int(self.dp[j]),
            cp=int(self.cp[j]),
            ep=int(self.ep[j]),
            vp=int(self.vp[j]),
            sp=bool(self.sequence_parallel[j]),
            micro_batch=int(self.micro_batch[j]),
            recompute=RECOMPUTE[int(self.recompute[j])],
            recompute_layers=None if np.isnan(rl) else int(rl),
            zero=int(self.zero[j]),
        )

    def select(self, which: np.ndarray) -> PlanGrid:
        """The plans a boolean mask or an index array picks, in that order."""
        return PlanGrid(**{f.name: getattr(self, f.name)[which] for f in fields(self)})

    @classmethod
    def concat(cls, grids: Iterable[PlanGrid]) -> PlanGrid:
        """One grid holding the plans of `grids` in order."""
        grids = list(grids)
        return cls(**{f.name: np.concatenate([getattr(g, f.name) for g in grids]) for f in fields(cls)})

    def terms(self, *, layers: int, seq_len: int, global_batch: int) -> PlanTerms:
        """The grid in the form the formulas compute in (floats), with the per-step counts derived once."""
        tp, pp, vp, dp, cp, ep, mb = (getattr(self, k).astype(float) for k in RULE_FIELDS)
        rl = self.recompute_layers
        return PlanTerms(
            tp=tp,
            pp=pp,
            vp=vp,
            dp=dp,
            cp=cp,
            ep=ep,
            micro_batch=mb,
            sequence_parallel=self.sequence_parallel.astype(bool),
            recompute=self.recompute,
            zero=self.zero,
            recompute_fraction=np.where(np.isnan(rl), 1.0, np.minimum(1.0, rl * pp / layers)),
            microbatches=global_batch / (dp * mb),
            tokens=mb * seq_len / cp,
            stage_layers=np.ceil(layers / (pp * vp)) * vp,
            dense_dp=dp * cp,
            expert_dp=dp * cp * tp / ep,
        )

    def rule_masks(
        self, model: ModelSpec, seq_len: int, global_batch: int, software: Stack | None = None
    ) -> dict[str, np.ndarray]:
        """Rule key -> mask of the plans that break it, for every rule of layout.RULES that `software`'s
        framework enforces (default Megatron-Core)."""
        x = {k: getattr(self, k) for k in RULE_FIELDS}
        return {
            r.key: np.broadcast_to(
                np.asarray(r.bad(model, seq_len, global_batch, x), dtype=bool), (len(self),)
            )
            for r in rules_for(software)
        }


@dataclass(frozen=True, kw_only=True)
class PlanTerms:
    """A PlanGrid as the step-time and memory formulas read it (float arrays over plans; build with
    `PlanGrid.terms`). Degrees, micro_batch, sequence_parallel, recompute and zero as in PlanGrid, and:

    recompute_fraction: share of a stage's layers full recomputation covers (Megatron
        `recompute_num_layers` / layers per stage, capped at 1; 1 when recompute_layers is NaN).
    microbatches: m = B / (dp · micro_batch), micro-batches per step per pipeline (B = global batch).
    tokens: T = micro_batch · S / cp, tokens of one micro-batch on one TP group (S = sequence length).
    stage_layers: ceil(L / (pp · vp)) · vp, layers on a GPU of the busiest stage (L = layers).
    dense_dp: dp · cp, the group Megatron shards the dense optimizer and gradients over.
    expert_dp: dp · cp · tp / ep, the expert-data-parallel group (Megatron-Core "parallel folding").
    """

    tp: np.ndarray
    pp: np.ndarray
    vp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    micro_batch: np.ndarray
    sequence_parallel: np.ndarray
    recompute: np.ndarray
    zero: np.ndarray
    recompute_fraction: np.ndarray
    microbatches: np.ndarray
    tokens: np.ndarray
    stage_layers: np.ndarray
    dense_dp: np.ndarray
    expert_dp: np.ndarray


def _splits(model: ModelSpec, num_gpus: int, seq_len: int) -> list[tuple[int, int, int]]:
    """The search's (tp, pp, cp): products dividing num_gpus, tp <= heads, pp <= layers, cp <= seq_len."""
    divs = divisors(num_gpus)
    return [
        (tp, pp, cp)
        for tp, pp, cp in itertools.product(divs, divs, divs)
        if not (num_gpus % (tp * pp * cp) or tp > model.heads or pp > model.layers or cp > seq_len)
    ]


def _options(model: ModelSpec, num_gpus: int, max_vp: int, software: Stack) -> tuple[list[int], list[int]]:
    """(virtual-stage depths for pp > 1, expert-parallel degrees) the search tries."""
    vps = list(range(1, (max_vp if software.interleaving else 1) + 1))
    eps = [e for e in divisors(num_gpus) if model.experts % e == 0] if model.is_moe else [1]
    return vps, eps


def search_chunks(
    model: ModelSpec,
    num_gpus: int,
    *,
    seq_len: int,
    max_vp: int = 8,
    software: Stack | None = None,
    micro_batches: tuple[int, ...] = MICRO_BATCHES,
    recomputes: tuple[str, ...] = RECOMPUTES,
    zero_stages: tuple[int, ...] = ZERO_STAGES,
) -> list[PlanGrid]:
    """The search's grid, one PlanGrid per (tp, pp, cp) (see the module docstring); vp goes up to `max_vp`
    when the software has the interleaved schedule (default software: Megatron-Core)."""
    vps, eps = _options(model, num_gpus, max_vp, software or stack())
    codes = [RECOMPUTE_CODE[r] for r in recomputes]
    chunks = []
    for tp, pp, cp in _splits(model, num_gpus, seq_len):
        grid = np.array(
            list(itertools.product(vps if pp > 1 else vps[:1], eps, micro_batches, codes, zero_stages))
        )
        n = len(grid)
        chunks.append(
            PlanGrid(
                tp=np.full(n, tp),
                pp=np.full(n, pp),
                cp=np.full(n, cp),
                dp=np.full(n, num_gpus // (tp * pp * cp)),
                vp=grid[:, 0],
                ep=grid[:, 1],
                micro_batch=grid[:, 2],
                recompute=grid[:, 3],
                zero=grid[:, 4],
                sequence_parallel=np.full(n, tp > 1),
                recompute_layers=np.full(n, np.nan),
            )
        )
    return chunks


def count_plans(
    model: ModelSpec | str,
    num_gpus: int,
    *,
    seq_len: int,
    max_vp: int = 8,
    software: Stack | str = "megatron-core",
    micro_batches: tuple[int, ...] = MICRO_BATCHES,
    recomputes: tuple[str, ...] = RECOMPUTES,
    zero_stages: tuple[int, ...] = ZERO_STAGES,
) -> int:
    """How many plans `search_chunks` (and so `search_training`) enumerates, counted without building them."""
    model = load_model(model) if isinstance(model, str) else model
    sw = stack(software) if isinstance(software, str) else software
    vps, eps = _options(model, num_gpus, max_vp, sw)
    per = len(eps) * len(micro_batches) * len(recomputes) * len(zero_stages)
    return sum(len(vps if pp > 1 else vps[:1]) * per for _, pp, _ in _splits(model, num_gpus, seq_len))
