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
from tenfold.perf.training.stack import Stack, stack

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
    recompute: "none", "selective" (the software's selective policy: the attention core, or torchtitan's
        per-op policy, see stack.Stack.selective_policy) or "full" activation recomputation.
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


def _always(software: Stack) -> bool:
    return True


def max_chunks(layers: int, balanced: bool) -> int:
    """The most pipeline chunks (PP x VP) `layers` layers can fill: one layer each, and for a stack that
    balances its stages (`Stack.balanced_stages`) one more each for a chunk holding only the embedding and
    one holding only the output and loss (Megatron-Core `pipeline_model_parallel_layout`, whose stages may
    be `[embedding]` or `[loss]` alone; Llama 3, arXiv 2407.21783 §3.3.2)."""
    return layers + 2 if balanced else layers


def embedding_loss_split(layers: int, chunks):
    """Mask: `layers` do not split into `chunks` equal chunks but layers + 2 do, so a balanced-stage stack
    splits them with the embedding and the loss counted as one layer each (Megatron-Core
    account_for_embedding/loss_in_pipeline_split)."""
    chunks = np.asarray(chunks)
    return (np.mod(layers, chunks) != 0) & (np.mod(layers + 2, chunks) == 0)


@dataclass(frozen=True)
class Rule:
    """A structural rule: `bad(model, seq_len, global_batch, x)` -> bool mask of violations, where x maps
    RULE_FIELDS to arrays (or scalars); `message(model, seq_len, global_batch, x)` -> the reason for one
    violating plan (x of scalars); `source`: where the rule comes from (framework file or paper);
    `applies(software)`: whether the framework a software stack models enforces it."""

    key: str
    bad: Callable[..., np.ndarray]
    message: Callable[..., str]
    source: str = ""
    applies: Callable[[Stack], bool] = _always


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


def microbatches(global_batch: int, x: dict) -> np.ndarray:
    """Micro-batches per step per pipeline, m = B / (dp · micro-batch) (0 when it does not divide)."""
    per = np.asarray(x["dp"]) * np.asarray(x["micro_batch"])
    return np.where(global_batch % per == 0, global_batch // per, 0)


def _megatron_interleaving(software: Stack) -> bool:
    return software.pp_schedule == "1f1b" and software.interleave_needs_pp_multiple


def _dualpipe(software: Stack) -> bool:
    return software.pp_schedule == "dualpipe"


def _uneven_stages_ok(layers: int, pp: np.ndarray) -> np.ndarray:
    """Whether `layers` over `pp` stages (vp = 1) can be launched with equal middle stages of
    ceil(layers / pp) layers and the remainder split between the first and last stage (Megatron-Core
    `--decoder-first-pipeline-num-layers` / `--decoder-last-pipeline-num-layers`)."""
    pp = np.asarray(pp)
    k = -(-layers // pp)
    rest = layers - np.maximum(pp - 2, 0) * k
    return (pp <= 2) | ((rest >= 2) & (rest <= 2 * k))


_MCORE_SCHEDULES = (
    "Megatron-Core megatron/core/pipeline_parallel/schedules.py, "
    "forward_backward_pipelining_with_interleaving: core_r0.7.0 raises unless num_microbatches % "
    "pipeline_parallel_size == 0; later releases (microbatch_group_size_per_vp_stage, default PP) need "
    "PP <= num_microbatches. A multiple of PP satisfies both"
)
_MCORE_ARGS = (
    "Megatron-LM megatron/training/arguments.py: num_layers divisible by the pipeline size unless "
    "--decoder-first/last-pipeline-num-layers set uneven stages; with --num-layers-per-virtual-pipeline-"
    "stage the layers per stage divide into virtual stages"
)


def _pp_layers_rule(*, balanced: bool) -> Rule:
    """PP x VP chunks may not exceed `max_chunks`; the rule of stacks with or without balanced stages."""
    extra = " + embedding + loss" if balanced else ""
    return Rule(
        "pp_layers",
        lambda m, s, g, x: x["pp"] * x["vp"] > max_chunks(m.layers, balanced),
        lambda m, s, g, x: (
            f"PP={x['pp']} x VP={x['vp']} = {x['pp'] * x['vp']} chunks exceed the "
            f"{max_chunks(m.layers, balanced)} that {m.layers} layers{extra} fill"
        ),
        "every pipeline chunk holds at least one layer (Narayanan et al. 2021, "
        "https://arxiv.org/abs/2104.04473 §2.2), or with balanced stages the embedding or the loss alone "
        "(Megatron-Core pipeline_model_parallel_layout)",
        lambda sw: sw.balanced_stages == balanced,
    )


RULES: tuple[Rule, ...] = (
    Rule(
        "tp_heads",
        lambda m, s, g, x: m.heads % x["tp"] != 0,
        lambda m, s, g, x: f"TP={x['tp']} does not divide {m.heads} heads",
        "Megatron-Core attention.py: num_attention_heads divisible by the tensor-parallel size "
        "(Shoeybi et al. 2019, https://arxiv.org/abs/1909.08053 §3)",
    ),
    Rule(
        "tp_kv_heads",
        lambda m, s, g, x: (m.kv_heads % x["tp"] != 0) & (x["tp"] <= m.heads) & (not m.is_mla),
        lambda m, s, g, x: f"TP={x['tp']} does not divide {m.kv_heads} KV heads",
        "Megatron-Core attention.py: num_query_groups divisible by the tensor-parallel size",
    ),
    Rule(
        "tp_ffn",
        lambda m, s, g, x: _tp_splits_ffn(m, x["tp"]),
        lambda m, s, g, x: (
            f"TP={x['tp']} does not divide the FFN width ({', '.join(map(str, _ffn_widths(m)))})"
        ),
        "Megatron-Core ColumnParallelLinear: output size divisible by the tensor-parallel size",
    ),
    _pp_layers_rule(balanced=False),
    _pp_layers_rule(balanced=True),
    Rule(
        "vp_needs_pp",
        lambda m, s, g, x: (x["vp"] > 1) & (x["pp"] == 1),
        lambda m, s, g, x: f"VP={x['vp']} needs PP > 1",
        "Megatron-LM arguments.py: the interleaved schedule needs pipeline_model_parallel_size > 1",
    ),
    Rule(
        "vp_layers",
        lambda m, s, g, x: (x["vp"] > 1) & (m.layers % (x["pp"] * x["vp"]) != 0),
        lambda m, s, g, x: (
            f"VP={x['vp']}: {m.layers} layers do not split into PP x VP = {x['pp'] * x['vp']} equal chunks"
        ),
        _MCORE_ARGS,
        lambda sw: sw.pp_schedule == "1f1b" and not sw.balanced_stages,
    ),
    Rule(
        "vp_layers",
        lambda m, s, g, x: (
            (x["vp"] > 1)
            & (m.layers % (x["pp"] * x["vp"]) != 0)
            & ~embedding_loss_split(m.layers, x["pp"] * x["vp"])
        ),
        lambda m, s, g, x: (
            f"VP={x['vp']}: neither {m.layers} layers nor {m.layers} + embedding + loss split into "
            f"PP x VP = {x['pp'] * x['vp']} equal chunks"
        ),
        _MCORE_ARGS + "; Megatron-Core transformer_config.py: account_for_embedding/loss_in_pipeline_split "
        "count the embedding and the loss as one layer each",
        lambda sw: sw.pp_schedule == "1f1b" and sw.balanced_stages,
    ),
    Rule(
        "pp_uneven",
        lambda m, s, g, x: (x["vp"] == 1) & (m.layers % x["pp"] != 0) & ~_uneven_stages_ok(m.layers, x["pp"]),
        lambda m, s, g, x: (
            f"PP={x['pp']}: {m.layers} layers cannot be split into equal middle stages and an uneven "
            "first/last stage"
        ),
        _MCORE_ARGS,
    ),
    Rule(
        "vp_microbatches",
        lambda m, s, g, x: (x["vp"] > 1) & (microbatches(g, x) % x["pp"] != 0),
        lambda m, s, g, x: (
            f"VP={x['vp']}: the interleaved schedule needs the micro-batches per step "
            f"({g // (x['dp'] * x['micro_batch'])}) to be a multiple of PP={x['pp']}"
        ),
        _MCORE_SCHEDULES,
        _megatron_interleaving,
    ),
    Rule(
        "vp_software",
        lambda m, s, g, x: np.asarray(x["vp"]) > 1,
        lambda m, s, g, x: f"VP={x['vp']}: this pipeline engine has no interleaved schedule",
        "DeepSpeed runtime/pipe/engine.py: PipelineEngine runs 1F1B without virtual stages",
        lambda sw: not sw.interleaving,
    ),
    Rule(
        "dualpipe",
        lambda m, s, g, x: (x["pp"] > 1) & ((x["pp"] % 2 != 0) | (microbatches(g, x) < 2 * x["pp"])),
        lambda m, s, g, x: (
            f"DualPipe needs an even PP (got {x['pp']}) and at least 2·PP micro-batches per step "
            f"(got {g // (x['dp'] * x['micro_batch'])})"
        ),
        "deepseek-ai/DualPipe dualpipe.py: num_ranks even and num_chunks >= 2 * num_ranks",
        _dualpipe,
    ),
    Rule(
        "ep_dense",
        lambda m, s, g, x: (x["ep"] > 1) & (not m.is_moe),
        lambda m, s, g, x: f"EP={x['ep']} on a dense model",
        "expert parallelism splits experts; a dense model has none",
    ),
    Rule(
        "ep_experts",
        lambda m, s, g, x: m.is_moe & (np.maximum(m.experts, 1) % x["ep"] != 0),
        lambda m, s, g, x: f"EP={x['ep']} does not divide {m.experts} experts",
        "Megatron-Core moe_layer.py: num_moe_experts divisible by the expert-parallel size",
    ),
    Rule(
        "ep_fold",
        lambda m, s, g, x: (x["tp"] * x["cp"] * x["dp"]) % x["ep"] != 0,
        lambda m, s, g, x: f"EP={x['ep']} does not divide TP·CP·DP = {x['tp'] * x['cp'] * x['dp']}",
        "Megatron-Core parallel_state.py (parallel folding): expert groups tile TP x CP x DP",
    ),
    Rule(
        "cp_seq",
        lambda m, s, g, x: (x["cp"] > 1) & (s % (2 * x["cp"]) != 0),
        lambda m, s, g, x: f"CP={x['cp']} needs the sequence length ({s}) divisible by 2·CP = {2 * x['cp']}",
        "Megatron-Core get_batch_on_this_cp_rank: the sequence splits into 2·CP load-balanced chunks",
    ),
    Rule(
        "batch",
        lambda m, s, g, x: g % (x["dp"] * x["micro_batch"]) != 0,
        lambda m, s, g, x: (
            f"global batch {g} is not a multiple of DP x micro-batch = {x['dp']} x {x['micro_batch']}"
        ),
        "Megatron-LM microbatches.py: global batch divisible by micro-batch x data-parallel size",
    ),
)


def rules_for(software: Stack | None = None) -> tuple[Rule, ...]:
    """The rules the framework `software` models enforces (default: Megatron-Core)."""
    sw = software or stack()
    return tuple(r for r in RULES if r.applies(sw))


def broken_rules(
    model: ModelSpec, layout: Layout, *, seq_len: int, global_batch: int, software: Stack | None = None
) -> list[Rule]:
    """The structural rules `layout` breaks under `software` (default Megatron-Core), in RULES order."""
    x = {k: np.asarray(getattr(layout, k)) for k in RULE_FIELDS}
    return [r for r in rules_for(software) if bool(np.asarray(r.bad(model, seq_len, global_batch, x)))]


def layout_problems(
    model: ModelSpec, layout: Layout, *, seq_len: int, global_batch: int, software: Stack | None = None
) -> list[str]:
    """Every structural rule `layout` breaks under `software`, as readable reasons (empty if none)."""
    x = {k: getattr(layout, k) for k in RULE_FIELDS}
    out = [
        r.message(model, seq_len, global_batch, x)
        for r in broken_rules(model, layout, seq_len=seq_len, global_batch=global_batch, software=software)
    ]
    if layout.etp != 1:
        out.append(f"ETP={layout.etp}: expert tensor parallelism other than 1 is not modelled")
    return out
