"""What would fit when a serving configuration's weights do not: the answer to "out of memory" that names
a way out, with its numbers.

Three ways, each tried with the same memory model that refused the configuration (memory.py):
* more GPUs of the same kind and the same shape of deployment: TP (and EP, if the deployment uses it)
  scaled up for a TP instance, attention DP and EP scaled up for a DEP instance; the smallest count, by
  doubling, up to MAX_GPUS (one NVL72 rack holds 72);
* a smaller weight format that this GPU and engine run, natively or weight-only (presets.py), on the same
  deployment: the largest one that fits;
* offloading part of the weights to CPU memory, where the engine can (vLLM and SGLang `--cpu-offload-gb`);
  the amount is the per-GPU shortfall; its cost (every step streams the offloaded bytes over PCIe or C2C)
  is not modelled, so it is named, not estimated.
"""

from __future__ import annotations

import math
from dataclasses import replace

from tenfold.perf.serving.memory import ServingMemory, serving_memory
from tenfold.perf.serving.query import WEIGHT_PRECISIONS, ServingQuery
from tenfold.perf.serving.results import Deployment
from tenfold.perf.specs.catalog import GiB
from tenfold.perf.specs.precision import check_supported, get_precision

MAX_GPUS = 72


def memory_for(query: ServingQuery) -> ServingMemory:
    """serving_memory for a query's model, engine, GPU, deployment and formats."""
    dep = query.deployment
    return serving_memory(
        query.model,
        query.engine,
        capacity_B=query.hardware.hbm_bytes,
        tp=dep.tp,
        gpus=dep.gpus,
        formats=query.formats,
        input_len=query.input_len,
        output_len=query.output_len,
        draft_tokens=query.draft_tokens,
    )


def scaled(dep: Deployment, k: int) -> Deployment:
    """The deployment on k times the GPUs, same shape (DEP grows its DP and EP; TP grows TP and EP)."""
    if dep.dp > 1:
        return Deployment(tp=1, dp=dep.dp * k, ep=dep.ep * k if dep.ep > 1 else 1)
    return Deployment(tp=dep.tp * k, dp=1, ep=dep.ep * k if dep.ep > 1 else 1)


def more_gpus(query: ServingQuery) -> str:
    """The smallest scale-up of the deployment whose memory holds one sequence, or ''."""
    k = 2
    while query.deployment.gpus * k <= MAX_GPUS:
        dep = scaled(query.deployment, k)
        if not dep.problems(query.model):
            mem = memory_for(replace(query, deployment=dep))
            if mem.max_batch_memory >= 1:
                return (
                    f"{dep.describe()} on {dep.gpus} x {query.hardware.name} "
                    f"({mem.weights_GiB:.1f} GiB of weights per GPU, "
                    f"{mem.max_batch_memory} sequences per rank)"
                )
        k *= 2
    return ""


def smaller_format(query: ServingQuery) -> str:
    """The largest weight format below the query's that this GPU and engine run and that fits, or ''."""
    now = get_precision(query.precision).operand_bytes
    smaller = sorted(
        (n for n in WEIGHT_PRECISIONS if get_precision(n).operand_bytes < now),
        key=lambda n: -get_precision(n).operand_bytes,
    )
    for name in smaller:
        q = replace(query, precision=name, activations=None, attention_precision=None)
        f = q.formats
        if check_supported(f.activations, q.hardware) or check_supported(f.attention, q.hardware):
            continue
        mem = memory_for(q)
        if mem.max_batch_memory >= 1:
            how = " weight-only" if q.weight_only else ""
            return (
                f"weights in {name}{how} ({mem.weights_GiB:.1f} GiB per GPU, {mem.max_batch_memory} "
                "sequences per rank)"
            )
    return ""


def offload(query: ServingQuery, short_GiB: float) -> str:
    """Weight offload to CPU memory, if the engine has it."""
    eng = query.engine
    if not eng.weight_offload:
        return f"{eng.name} does not offload weights to CPU memory (vLLM and SGLang do: --cpu-offload-gb)"
    gb = math.ceil(short_GiB * GiB / 1e9)
    return (
        f"{eng.name} --cpu-offload-gb {gb} (the shortfall, per GPU; each step then streams those weights "
        "from CPU memory, a cost tenfold does not model)"
    )


def what_fits(query: ServingQuery, memory: ServingMemory) -> str:
    """One sentence naming what would fit instead (module docstring), given the memory that did not."""
    need, usable = memory.need_and_usable_GiB(query.engine.kv_fraction, query.engine.kv_basis)
    short = max(need - usable, 0.0)
    ways = [w for w in (more_gpus(query), smaller_format(query)) if w]
    ways.append(offload(query, short))
    return "would fit: " + "; or ".join(ways)
