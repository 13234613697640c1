"""Training-aware sensitivity: what a few optimizer steps feel when one block's GEMMs are quantized.

A forward-only measurement (`sensitivity`) is a post-training view: it misses what quantized gradients
(the dgrad and wgrad GEMMs) do to optimisation, which is why NVIDIA keeps the last blocks of a model in
BF16 ("Pretraining Large Language Models with NVFP4", arXiv 2509.25149 §4.1). Here, from the model's
current state (a checkpoint), for each group of layers (a transformer block by default, to keep the cost
down) and each candidate recipe, a copy of the model takes `steps` optimizer steps on the same batches as a
high-precision copy, with only that group's linear layers converted (all three GEMMs quantized). The score
is the loss on held-out batches after those steps, minus the high-precision copy's (`delta`), and the
cosine between the group's weight update and the high-precision update (`update_cosine`, per group, so
that large gradients elsewhere do not dominate it).

`greedy_repair` verifies a chosen policy with such a short run and swaps the group that hurts most back to
high precision for the least harmful high-precision group, keeping the FP4 share, while the measured loss
improves. Cost: (1 + groups x candidates) short runs for the score; each repair trial is one more.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from statistics import fmean
from typing import Any

import torch
from torch import nn

from tenfold.engine.autoprecision.sensitivity import cross_entropy_loss
from tenfold.engine.convert import ConversionPolicy, convert
from tenfold.engine.recipes import RECIPE_NAMES
from tenfold.stats import paired_difference

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
OptFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
POLICY = ConversionPolicy(hp_first_blocks=0, hp_last_blocks=0)


@dataclass(frozen=True, kw_only=True)
class TrainingSensitivity:
    """Scores per group and candidate: `delta[group][candidate]` (loss after the steps minus the
    high-precision run's), `delta_se[group][candidate]` (its standard error over the held-out batches,
    from the per-batch paired differences: a delta within about 2 SE of zero is not a measured harm),
    `update_cosine[group][candidate]`; `layers[group]`: its layer names; the cost."""

    delta: dict[str, dict[str, float]]
    delta_se: dict[str, dict[str, float]]
    update_cosine: dict[str, dict[str, float]]
    layers: dict[str, tuple[str, ...]]
    hp_loss: float
    steps: int
    optimizer_steps: int
    seconds: float


def _groups(model: nn.Module, candidate: str, pol: ConversionPolicy, by: str) -> dict[str, tuple[str, ...]]:
    decisions = convert(copy.deepcopy(model), candidate, policy=pol).converted
    groups: dict[str, list[str]] = {}
    for d in decisions:
        key = f"block {d.block}" if by == "block" and d.block is not None else d.name
        groups.setdefault(key, []).append(d.name)
    return {k: tuple(v) for k, v in groups.items()}


def _run(
    model: nn.Module,
    layer_recipes: dict[str, str],
    make_opt: OptFactory,
    train: list[tuple[Any, torch.Tensor]],
    evaluate: list[tuple[Any, torch.Tensor]],
    loss_fn: LossFn,
    seed: int,
    pol: ConversionPolicy,
) -> tuple[list[float], dict[str, torch.Tensor]]:
    """A copy of `model` with `layer_recipes` applied takes one step per training batch; returns the
    held-out loss of each evaluation batch afterwards and each parameter's update (by the original model's
    parameter names)."""
    m = copy.deepcopy(model)
    for rec in sorted(set(layer_recipes.values())):
        names = [n for n, r in layer_recipes.items() if r == rec]
        include = tuple(f"^{re.escape(n)}$" for n in names)
        convert(m, rec, policy=replace(pol, include=include))
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    opt = make_opt(m.parameters())
    torch.manual_seed(seed)
    m.train()
    for x, y in train:
        opt.zero_grad(set_to_none=True)
        loss_fn(m(x), y).backward()
        opt.step()
    m.eval()
    with torch.no_grad():
        losses = [loss_fn(m(x), y).item() for x, y in evaluate]
    return losses, {n: p.detach() - before[n] for n, p in m.named_parameters()}


def _cosine(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], layers: Sequence[str]) -> float:
    keys = [k for k in a if any(k.startswith(n + ".") for n in layers)]
    if not keys:
        return float("nan")
    u = torch.cat([a[k].flatten() for k in keys])
    v = torch.cat([b[k].flatten() for k in keys])
    return torch.nn.functional.cosine_similarity(u, v, dim=0).item()


def train_sensitivity(
    model: nn.Module,
    make_opt: OptFactory,
    train_batches: Iterable[tuple[Any, torch.Tensor]],
    eval_batches: Iterable[tuple[Any, torch.Tensor]],
    candidates: Sequence[str] = ("nvfp4_no_hp_layers",),
    *,
    by: str = "block",
    loss_fn: LossFn | None = None,
    seed: int = 0,
    policy: ConversionPolicy | None = None,
    max_seconds: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> TrainingSensitivity:
    """Score each group (`by` "block" or "layer") under each candidate recipe by a short training run
    (one optimizer step per training batch) against the same run in high precision.

    `model` is not changed. `policy` picks the eligible layers (its position-based high-precision blocks
    are ignored: where to keep high precision is what this measures). `make_opt(params)` builds a fresh
    optimizer per run (give it the checkpoint's settings). `max_seconds`: ValueError before the
    measurement when the high-precision run's time, times the runs still to do, says it would take
    longer."""
    if by not in ("block", "layer"):
        raise ValueError(f"by must be 'block' or 'layer', got {by!r}")
    cands = tuple(candidates)
    bad = [c for c in cands if c not in RECIPE_NAMES]
    if not cands or bad:
        raise ValueError(
            f"candidates must be recipe names, got {list(cands)}; valid: {', '.join(RECIPE_NAMES)}"
        )
    train, evaluate = list(train_batches), list(eval_batches)
    if not train or not evaluate:
        raise ValueError("train_batches and eval_batches must each hold at least one (inputs, targets) pair")
    lf = loss_fn or cross_entropy_loss
    pol = replace(policy or POLICY, hp_first_blocks=0, hp_last_blocks=0)
    groups = _groups(model, cands[0], pol, by)
    t0 = time.perf_counter()
    hp_losses, hp_update = _run(model, {}, make_opt, train, evaluate, lf, seed, pol)
    runs = len(groups) * len(cands)
    hp_s = time.perf_counter() - t0
    if max_seconds is not None and hp_s * (1 + runs) > max_seconds:
        raise ValueError(
            f"the measurement would take about {hp_s * (1 + runs):.0f} s ({1 + runs} runs of "
            f"{len(train)} steps, {hp_s:.1f} s each in high precision; quantized runs are slower) > "
            f"max_seconds {max_seconds:g}"
        )
    delta: dict[str, dict[str, float]] = {g: {} for g in groups}
    delta_se: dict[str, dict[str, float]] = {g: {} for g in groups}
    cosine: dict[str, dict[str, float]] = {g: {} for g in groups}
    done = 0
    for g, names in groups.items():
        for c in cands:
            losses, update = _run(model, dict.fromkeys(names, c), make_opt, train, evaluate, lf, seed, pol)
            d = paired_difference(losses, hp_losses)
            delta[g][c], delta_se[g][c] = d.mean, d.se
            cosine[g][c] = _cosine(update, hp_update, names)
            done += 1
            if progress is not None:
                progress(done, runs)
    return TrainingSensitivity(
        delta=delta,
        delta_se=delta_se,
        update_cosine=cosine,
        layers=groups,
        hp_loss=fmean(hp_losses),
        steps=len(train),
        optimizer_steps=len(train) * (1 + runs),
        seconds=time.perf_counter() - t0,
    )


def greedy_repair(
    model: nn.Module,
    make_opt: OptFactory,
    train_batches: Iterable[tuple[Any, torch.Tensor]],
    eval_batches: Iterable[tuple[Any, torch.Tensor]],
    sens: TrainingSensitivity,
    fp4_groups: Sequence[str],
    *,
    fp4: str = "nvfp4_no_hp_layers",
    loss_fn: LossFn | None = None,
    seed: int = 0,
    policy: ConversionPolicy | None = None,
    max_trials: int = 8,
) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
    """Verify the policy "`fp4_groups` in `fp4`, the other groups in high precision" with a short run and
    repair it: try swapping the FP4 group with the largest single-group harm (`sens.delta`) for the
    high-precision group with the smallest (the pair with the largest predicted gain first, even when
    that gain is negative: the joint run, not the single-group scores, decides), keep the swap when the
    joint run's loss drops, stop at the first swap that does not help or after `max_trials`. Returns the
    final FP4 groups and the trials (loss before and after)."""
    unknown = [g for g in fp4_groups if g not in sens.layers]
    if unknown:
        raise ValueError(f"unknown groups {unknown}; valid: {', '.join(sens.layers)}")
    lf = loss_fn or cross_entropy_loss
    train, evaluate = list(train_batches), list(eval_batches)
    pol = replace(policy or POLICY, hp_first_blocks=0, hp_last_blocks=0)

    def joint(groups: Sequence[str]) -> float:
        recipes = {n: fp4 for g in groups for n in sens.layers[g]}
        return fmean(_run(model, recipes, make_opt, train, evaluate, lf, seed, pol)[0])

    def harm(g: str) -> float:
        return sens.delta[g].get(fp4, max(sens.delta[g].values()))

    current = list(fp4_groups)
    loss = joint(current)
    trials: list[dict[str, Any]] = []
    tried: set[tuple[str, str]] = set()
    for _ in range(max_trials):
        hp = [g for g in sens.layers if g not in current]
        pairs = [(a, b) for a in current for b in hp if (a, b) not in tried]
        if not pairs:
            break
        out, into = max(pairs, key=lambda p: harm(p[0]) - harm(p[1]))
        tried.add((out, into))
        candidate = [into if g == out else g for g in current]
        new = joint(candidate)
        trials.append({"out": out, "in": into, "loss_before": loss, "loss_after": new, "kept": new < loss})
        if new >= loss:
            break
        current, loss = candidate, new
    return tuple(current), trials


def block_deltas(sens: TrainingSensitivity, flops: dict[str, float]) -> dict[str, dict[str, float]]:
    """Per-layer loss increases for `auto_policy` from per-group ones: each group's increase shared among
    its layers in proportion to their GEMM FLOPs (so a group's layers sum to the group)."""
    out: dict[str, dict[str, float]] = {}
    for g, names in sens.layers.items():
        total = sum(flops[n] for n in names)
        for n in names:
            out[n] = {c: d * flops[n] / total for c, d in sens.delta[g].items()}
    return out
