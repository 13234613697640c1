"""Pipeline parallelism in serving: what one stage holds and runs, the send between stages, and how long a
prompt split into chunks takes to cross the pipeline.

With pp stages the L layers split into consecutive groups of ceil(L/pp) or floor(L/pp); the slowest stage
sets the pace, so the model runs the heaviest one (`stage_model`): ceil(L/pp) layers taken from the end
of the model (an MoE model's leading dense layers, lighter than MoE layers, fall on the first stage) plus
the output head. SGLang recommends exactly that split ("put the larger partition in the higher PP rank",
e.g. DeepSeek-V3.1 `SGLANG_PP_LAYER_PARTITION=15,15,15,16`, [LMSYS]).

Between stages each micro-batch's hidden states and residual (BF16, 2·T·h·2 bytes for T tokens) go to
the next stage by point-to-point send (`stage_send_time`); SGLang's `PPProxyTensors` and vLLM's
`IntermediateTensors` carry those two tensors. Neighbouring stages are tp·dp ranks apart, so they share a
scale-up domain when tp·dp is below its size (comm.p2p_time); otherwise the send crosses the network.
The send is counted in series with the stage's compute (a token's path through the pipeline includes
pp sends), a slight overestimate where the engine overlaps it (SGLang's async P2P).

Continuous batching keeps pp micro-batches in flight (vLLM V1 `max_concurrent_batches = pp`; SGLang's
micro-batching event loop, [LMSYS]), each with 1/pp of the running sequences: every stage is busy, a
decode token crosses all pp stages, so TPOT = pp · (stage time + send) and the throughput is set by the
slowest stage.

Chunked pipelined prefill ([LMSYS] "Chunked Pipeline Parallelism", after TeraPipe, Li et al. ICML 2021):
a long prompt's chunks flow through the stages like micro-batches, chunk i + 1 entering stage 1 while
chunk i runs on stage 2. Every chunk takes the same time t_i on every stage (a flow shop with identical
machines), so the last chunk leaves the last stage after

    sum_i t_i + (pp - 1) · max_i t_i          (`pipelined_time`)

which is (chunks + pp - 1) stage times for equal chunks, and n·t (no bubble) at pp = 1. A chunk's
attention grows with its prefix, so under fixed-size chunks the last chunk is the slowest; SGLang's
dynamic chunking shrinks later chunks to equalise the t_i ([LMSYS]), which this bound brackets from above.
The same pipelining of one request's chunks was proposed for vLLM V1 ("[V1][PP] Continue scheduling
prefill chunks", vllm-project/vllm pull request 13637); an engine that waits for chunk i to leave the
pipeline before sending chunk i + 1 takes about n·pp stage times instead.

[LMSYS] S. Cai et al., "Pipeline Parallelism in SGLang: Scaling to Million-Token Contexts and Beyond",
LMSYS blog, 2026-01-15, https://lmsys.org/blog/2026-01-15-chunked-pipeline/ (bubble ratio
(P - 1)/(P - 1 + M), PP communication B·S·H·(P - 1) bytes).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from tenfold.perf import comm
from tenfold.perf.specs.models import ModelSpec

SEND_TENSORS = 2  # hidden states + residual
SEND_BYTES = 2.0  # BF16


def stage_layers(model: ModelSpec, pp: int) -> int:
    """Layers of the heaviest pipeline stage: ceil(L/pp)."""
    return math.ceil(model.layers / pp)


def stage_model(model: ModelSpec, pp: int) -> ModelSpec:
    """The heaviest of `pp` stages as a model of its own: the last ceil(L/pp) layers (any leading dense
    layers of an MoE model go to earlier stages first). The model itself when pp = 1."""
    if pp <= 1:
        return model
    layers = stage_layers(model, pp)
    dense = max(0, model.dense_layers - (model.layers - layers))
    return replace(model, layers=layers, dense_layers=dense, published_params=0.0, published_active=0.0)


def stage_send_time(tokens, *, hidden: int, stage_gpus: int, pp: int, links: comm.Links):
    """Seconds to send one micro-batch of `tokens` tokens (per rank) to the next stage; 0 when pp = 1."""
    t = np.asarray(tokens, dtype=float)
    if pp <= 1:
        return np.zeros_like(t)
    return comm.p2p_time(t * hidden * SEND_TENSORS * SEND_BYTES, stage_gpus, links)


def pipelined_time(per_item, slowest, items, pp: int):
    """Time for `items` work items (prompt chunks) that each take `per_item` seconds on every stage (the
    slowest taking `slowest`) to leave the last of `pp` stages: items·per_item + (pp - 1)·slowest."""
    return np.asarray(items, dtype=float) * per_item + (pp - 1) * np.asarray(slowest, dtype=float)
