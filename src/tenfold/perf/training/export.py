"""A searched plan as launch arguments: Megatron-LM flags, a NeMo 2 recipe snippet or a torchtitan TOML.

Flag and key names follow the public sources:
* Megatron-LM `megatron/training/arguments.py` (pretrain_gpt.py): --tensor-model-parallel-size,
  --pipeline-model-parallel-size, --num-layers-per-virtual-pipeline-stage / --num-virtual-stages-per-
  pipeline-rank with --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split,
  --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers (uneven stages),
  --context-parallel-size, --expert-model-parallel-size, --micro-batch-size, --global-batch-size,
  --seq-length, --sequence-parallel, --recompute-granularity / --recompute-method / --recompute-num-layers,
  --use-distributed-optimizer, --use-megatron-fsdp with --data-parallel-sharding-strategy,
  --bf16, --fp8-format / --fp8-recipe, --fp4-format / --fp4-recipe.
* NeMo 2 recipes (nemo/collections/llm/recipes/*.py): `recipe.trainer.strategy.*_parallel_size`,
  `recipe.data.micro_batch_size` / `global_batch_size` / `seq_length`, `recipe.model.config.recompute_*`.
* torchtitan `torchtitan/config/job_config.py`: [parallelism] data_parallel_replicate_degree,
  data_parallel_shard_degree, tensor_parallel_degree, pipeline_parallel_degree, context_parallel_degree,
  expert_parallel_degree (torchtitan 0.1, 2025; earlier releases have no EP), pipeline_parallel_schedule,
  pipeline_parallel_microbatch_size; [training] local_batch_size, global_batch_size, seq_len;
  [activation_checkpoint] mode.
A plan a framework cannot express raises `Infeasible` naming what is missing.
"""

from __future__ import annotations

from tenfold.perf.errors import Infeasible
from tenfold.perf.training.estimate import TrainingEstimate
from tenfold.perf.training.layout import Layout

FRAMEWORKS = ("megatron", "nemo", "torchtitan")
_MEGATRON_PRECISION = {
    "bf16": ["--bf16"],
    "fp16": ["--fp16"],
    "fp8": ["--bf16", "--fp8-format hybrid", "--fp8-recipe tensorwise"],
    "mxfp8": ["--bf16", "--fp8-format e4m3", "--fp8-recipe mxfp8"],
    "nvfp4": ["--bf16", "--fp4-format e2m1", "--fp4-recipe nvfp4"],
}


def _stages(layout: Layout, layers: int) -> list[tuple[str, object]]:
    """How the layers split over pipeline stages and virtual stages, as (flag, value) pairs."""
    pp, vp = layout.pp, layout.vp
    if pp == 1:
        return []
    if vp > 1:
        if layers % (pp * vp) == 0:
            return [("num-layers-per-virtual-pipeline-stage", layers // (pp * vp))]
        return [
            ("num-virtual-stages-per-pipeline-rank", vp),
            ("account-for-embedding-in-pipeline-split", True),
            ("account-for-loss-in-pipeline-split", True),
        ]
    if layers % pp == 0:
        return []
    k = -(-layers // pp)
    rest = layers - (pp - 2) * k
    return [
        ("decoder-first-pipeline-num-layers", rest - rest // 2),
        ("decoder-last-pipeline-num-layers", rest // 2),
    ]


def _recompute(layout: Layout, layers_per_stage: int) -> list[tuple[str, object]]:
    if layout.recompute == "none":
        return []
    if layout.recompute == "selective":
        return [("recompute-granularity", "selective")]
    n = layers_per_stage if layout.recompute_layers is None else layout.recompute_layers
    return [("recompute-granularity", "full"), ("recompute-method", "block"), ("recompute-num-layers", n)]


def _megatron_pairs(e: TrainingEstimate, layers: int) -> list[tuple[str, object]]:
    lay = e.layout
    pairs: list[tuple[str, object]] = [
        ("tensor-model-parallel-size", lay.tp),
        ("pipeline-model-parallel-size", lay.pp),
        *_stages(lay, layers),
        ("context-parallel-size", lay.cp),
        ("expert-model-parallel-size", lay.ep),
        ("micro-batch-size", lay.micro_batch),
        ("global-batch-size", e.global_batch),
        ("seq-length", e.seq_len),
        ("sequence-parallel", lay.sequence_parallel),
        *_recompute(lay, -(-layers // lay.pp)),
    ]
    zero = lay.zero if lay.zero is not None else 1
    if zero == 1:
        pairs.append(("use-distributed-optimizer", True))
    elif zero >= 2:
        strategy = "optim_grads" if zero == 2 else "optim_grads_params"
        pairs += [("use-megatron-fsdp", True), ("data-parallel-sharding-strategy", strategy)]
    return pairs


def _megatron(e: TrainingEstimate, layers: int) -> str:
    if e.precision not in _MEGATRON_PRECISION:
        raise Infeasible(f"Megatron-LM has no flag for precision {e.precision!r}")
    flags = []
    for key, value in _megatron_pairs(e, layers):
        if value is True:
            flags.append(f"--{key}")
        elif value is not False:
            flags.append(f"--{key} {value}")
    flags += _MEGATRON_PRECISION[e.precision]
    return " \\\n    ".join(["python pretrain_gpt.py", *flags])


def _nemo(e: TrainingEstimate, layers: int) -> str:
    lay = e.layout
    strat = {
        "tensor_model_parallel_size": lay.tp,
        "pipeline_model_parallel_size": lay.pp,
        "virtual_pipeline_model_parallel_size": lay.vp if lay.vp > 1 else None,
        "context_parallel_size": lay.cp,
        "expert_model_parallel_size": lay.ep,
        "sequence_parallel": lay.sequence_parallel,
    }
    lines = [f"recipe.trainer.strategy.{k} = {v!r}" for k, v in strat.items()]
    if lay.vp > 1 and layers % (lay.pp * lay.vp):
        lines += [
            "recipe.trainer.strategy.account_for_embedding_in_pipeline_split = True",
            "recipe.trainer.strategy.account_for_loss_in_pipeline_split = True",
        ]
    lines += [
        f"recipe.data.micro_batch_size = {lay.micro_batch}",
        f"recipe.data.global_batch_size = {e.global_batch}",
        f"recipe.data.seq_length = {e.seq_len}",
    ]
    for key, value in _recompute(lay, -(-layers // lay.pp)):
        lines.append(f"recipe.model.config.{key.replace('-', '_')} = {value!r}")
    zero = lay.zero if lay.zero is not None else 1
    if zero >= 2:
        raise Infeasible(f"ZeRO-{zero}: NeMo 2 recipes expose the distributed optimizer (ZeRO-1) only")
    lines.append(f"recipe.trainer.strategy.ddp.use_distributed_optimizer = {zero == 1}")
    return "\n".join(lines)


def _torchtitan(e: TrainingEstimate, layers: int) -> str:
    lay = e.layout
    if (lay.cp * lay.dp) % lay.ep:
        raise Infeasible(
            f"EP={lay.ep}: torchtitan borrows experts from data x context parallel ({lay.dp * lay.cp})"
        )
    if lay.vp > 1 and layers % (lay.pp * lay.vp):
        raise Infeasible(f"VP={lay.vp}: {layers} layers do not split into {lay.pp * lay.vp} equal stages")
    zero = lay.zero if lay.zero is not None else 1
    shard, replicate = (lay.dp, 1) if zero >= 1 else (1, lay.dp)
    schedule = "Interleaved1F1B" if lay.vp > 1 else "1F1B"
    lines = [
        "[parallelism]",
        f"data_parallel_replicate_degree = {replicate}",
        f"data_parallel_shard_degree = {shard}",
        f"tensor_parallel_degree = {lay.tp}",
        f"pipeline_parallel_degree = {lay.pp}",
        f"context_parallel_degree = {lay.cp}",
        f"expert_parallel_degree = {lay.ep}",
    ]
    if lay.pp > 1:
        lines += [
            f'pipeline_parallel_schedule = "{schedule}"',
            f"pipeline_parallel_microbatch_size = {lay.micro_batch}",
        ]
    local = e.global_batch // lay.dp
    lines += ["", "[training]", f"local_batch_size = {local}", f"global_batch_size = {e.global_batch}"]
    lines += [f"seq_len = {e.seq_len}", "", "[activation_checkpoint]", f'mode = "{lay.recompute}"']
    if zero in (1, 2):
        lines.insert(0, f"# ZeRO-{zero} plan: torchtitan's FSDP2 also shards the weights (ZeRO-3 memory)")
    if lay.ep > 1:
        lines.insert(0, "# expert parallelism needs torchtitan 0.1 (2025) or later")
    return "\n".join(lines)


def export_plan(estimate: TrainingEstimate, framework: str, *, layers: int) -> str:
    """`estimate`'s plan as launch arguments for `framework` (one of FRAMEWORKS); `layers`: the model's
    transformer layers. ValueError for an unknown framework; Infeasible when it cannot express the plan."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown --export {framework!r}; choose one of {', '.join(FRAMEWORKS)}")
    if not estimate.feasible:
        raise Infeasible(f"no plan to export: {estimate.reason}")
    return {"megatron": _megatron, "nemo": _nemo, "torchtitan": _torchtitan}[framework](estimate, layers)
