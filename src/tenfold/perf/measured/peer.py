"""A second opinion on a serving row: NVIDIA aiconfigurator-core's own end-to-end aggregated estimate.

aiconfigurator-core (Apache-2.0, https://github.com/ai-dynamo/aiconfigurator) models continuous batching
("agg", in-flight batching) from its silicon-measured kernel tables: per engine step a mix of prefill
chunks and decode tokens, each op read from the measured GEMM / attention / MLA / MoE / NCCL tables of
the system, backend and version. This module runs that model on the deployment a tenfold `ServingQuery`
describes, the way aiconfigurator's own `cli estimate --mode agg` does (upper package
`aiconfigurator.cli.api._run_agg_estimate`): build the model config, resolve context FMHA against the
tables and native FP4 against the system, then `backend.run_agg(model, database, runtime, ctx_tokens=)`.

The mapping (same deployment, nothing fitted):

* model: the Hugging Face config aiconfigurator ships for the architecture (`MODELS`); Llama-3.3-70B
  has Llama-3.1-70B's architecture, DeepSeek-R1/V3 share one;
* GPU: the system whose tables stand for the tenfold hardware (`tables.COMM_SYSTEMS`; H800 has none);
* engine: trtllm / trtllm-bench -> "trtllm", vllm -> "vllm", sglang -> "sglang", newest measured version;
* parallelism: tp = attention TP, attention_dp = the deployment's dp, moe_ep = ep, moe_tp = GPUs / ep;
* formats: weights -> gemm and MoE quant mode (FP8 on DeepSeek is its block-scaled checkpoint), KV as
  resolved by tenfold's row reader, MXFP4 (gpt-oss) left to aiconfigurator's checkpoint inference;
* load: batch per attention rank = concurrency / dp; with no concurrency (the engine's max load), the
  largest batch aiconfigurator's own memory model admits (doubling, then bisection), capped by the
  engine's max_batch_size; context budget per step = the engine's max_num_tokens (its CLI default, the
  input length, when the engine sizes it itself);
* MTP: nextn = draft tokens, decode_tokens_per_iteration = accepted tokens per step.

Metrics: tokens/s/gpu (output), seq/s/gpu x (ISL + OSL) (total), tokens/s/user, ttft, tpot.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass

from tenfold.perf.measured.tables import COMM_SYSTEMS, available
from tenfold.perf.serving.query import ServingQuery

# row model name (regex, case-insensitive) -> aiconfigurator model path (a config it ships)
MODELS = (
    (r"deepseek-(r1|v3)", "deepseek-ai/DeepSeek-R1"),
    (r"gpt-oss-120b", "openai/gpt-oss-120b"),
    (r"gpt-oss-20b", "openai/gpt-oss-20b"),
    (r"llama-?3(\.[13])?-70b", "meta-llama/Meta-Llama-3.1-70B"),
    (r"llama-?3\.1-405b", "meta-llama/Meta-Llama-3.1-405B"),
    (r"llama-?3(\.1)?-8b", "meta-llama/Meta-Llama-3.1-8B"),
    (r"qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B"),
    (r"qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B"),
    (r"qwen3-32b", "Qwen/Qwen3-32B"),
    (r"mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1"),
    (r"mixtral-8x22b", "mistralai/Mixtral-8x22B-v0.1"),
)
BACKENDS = {"trtllm": "trtllm", "trtllm-bench": "trtllm", "vllm": "vllm", "sglang": "sglang"}
KV_MODES = {"fp8": "fp8", "bf16": "bfloat16", "fp16": "bfloat16", "int8": "int8"}
# tenfold weights precision -> (gemm_quant_mode, moe_quant_mode); None = aiconfigurator infers it
QUANT = {
    "bf16": ("bfloat16", "bfloat16"),
    "fp16": ("bfloat16", "bfloat16"),
    "fp8": ("fp8", "fp8"),
    "nvfp4": ("nvfp4", "nvfp4"),
    "mxfp4": (None, None),
}
BLOCK_FP8_MODELS = ("deepseek-ai/",)  # checkpoints whose FP8 is 128x128 block-scaled
METRICS = ("output_tokens_per_s_per_gpu", "total_tokens_per_s_per_gpu", "output_tokens_per_s_per_user")
METRICS_MS = ("ttft_ms", "tpot_ms")


@dataclass(frozen=True, kw_only=True)
class PeerEstimate:
    """aiconfigurator's value for one row in the row's unit (NaN with `reason` when it cannot say), and
    the setup it ran (`setup`: model path, system, backend/version, parallelism, quant, batch)."""

    value: float = math.nan
    reason: str = ""
    setup: str = ""


def aic_model(name: str) -> str | None:
    """The aiconfigurator model path standing for a row's model name (None: not shipped)."""
    for pattern, path in MODELS:
        if re.search(pattern, name, flags=re.IGNORECASE):
            return path
    return None


def _quant(path: str, weights: str) -> tuple[str | None, str | None] | None:
    modes = QUANT.get(weights)
    if modes and weights == "fp8" and path.startswith(BLOCK_FP8_MODELS):
        return ("fp8_block", "fp8_block")
    return modes


class _Runner:
    """One row's aiconfigurator model, database and backend, run at any batch size."""

    def __init__(self, path: str, system: str, backend: str, q: ServingQuery, gemm, moe):
        from aiconfigurator_core.sdk import perf_database
        from aiconfigurator_core.sdk.backends.factory import get_backend
        from aiconfigurator_core.sdk.config_builders import apply_nextn, build_model_config
        from aiconfigurator_core.sdk.models import get_model
        from aiconfigurator_core.sdk.models.helpers import (
            resolve_context_fmha_by_data,
            resolve_nvfp4_for_system,
        )

        dep = q.deployment
        version = perf_database.get_latest_database_version(system=system, backend=backend)
        self.database = perf_database.get_database(system, backend, version) if version else None
        if self.database is None:
            raise LookupError(f"no {backend} tables for {system}")
        moe_tp, moe_ep = (dep.moe_tp, dep.ep) if q.model.is_moe else (1, 1)
        config = build_model_config(
            tp_size=dep.tp,
            pp_size=1,
            attention_dp_size=dep.dp,
            moe_tp_size=moe_tp,
            moe_ep_size=moe_ep,
            gemm_quant_mode=gemm,
            moe_quant_mode=moe,
            kvcache_quant_mode=KV_MODES.get(q.formats.kv),
        )
        apply_nextn(config, q.draft_tokens)
        resolve_context_fmha_by_data(config, path, self.database, backend, is_context_role=True)
        resolve_nvfp4_for_system(config, system, path)
        self.model = get_model(path, config, backend)
        self.backend = get_backend(backend)
        self.q = q
        self.setup = (
            f"{path} {system} {backend} {version} tp{dep.tp} dp{dep.dp} etp{moe_tp} ep{moe_ep} "
            f"gemm {config.gemm_quant_mode.name if config.gemm_quant_mode else 'auto'} "
            f"moe {config.moe_quant_mode.name if config.moe_quant_mode else 'auto'} "
            f"kv {config.kvcache_quant_mode.name if config.kvcache_quant_mode else 'auto'}"
        )

    def run(self, batch: int) -> tuple[dict, bool]:
        """aiconfigurator's result dict at `batch` sequences per attention rank, and whether it fits."""
        from aiconfigurator_core.sdk.config import RuntimeConfig

        q, eng = self.q, self.q.engine
        runtime = RuntimeConfig(isl=q.input_len, osl=q.output_len, batch_size=int(batch))
        kwargs = {
            "ctx_tokens": eng.max_num_tokens or q.input_len,
            "free_gpu_memory_fraction": eng.kv_fraction,
        }
        if q.draft_tokens:
            kwargs["decode_tokens_per_iteration"] = q.accepted_tokens
        summary = self.backend.run_agg(self.model, self.database, runtime, **kwargs)
        fits = not (summary.check_oom() or summary.check_kv_cache_oom())
        return summary.get_result_dict(), fits


def _max_batch(runner: _Runner, cap: int) -> int | None:
    """Largest batch per rank (<= cap) that aiconfigurator's memory model admits, to within ~3 %."""
    lo, hi = 0, None
    b = 1
    while b <= cap:
        if runner.run(b)[1]:
            lo, b = b, b * 2
        else:
            hi = b
            break
    if lo == 0:
        return None
    if hi is None:
        if lo < cap and runner.run(cap)[1]:
            return cap
        hi = min(2 * lo, cap + 1) if lo < cap else cap + 1
    while hi - lo > max(1, lo // 32):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if runner.run(mid)[1] else (lo, mid)
    return lo


def _value(result: dict, metric: str, q: ServingQuery) -> float:
    if metric == "output_tokens_per_s_per_gpu":
        return float(result["tokens/s/gpu"])
    if metric == "total_tokens_per_s_per_gpu":
        return float(result["seq/s/gpu"]) * (q.input_len + q.output_len)
    if metric == "output_tokens_per_s_per_user":
        return float(result["tokens/s/user"])
    return float(result["ttft" if metric == "ttft_ms" else "tpot"])


def peer_estimate(
    q: ServingQuery, *, metric: str, concurrency: int | None, model_name: str = ""
) -> PeerEstimate:
    """aiconfigurator's estimate of `metric` for the deployment `q` at `concurrency` requests in flight
    (None: the engine's max load), as the module docstring maps it; `model_name` is the row's own name
    for the model (tried before the catalog's). A reason instead where it has no model, system, backend
    or format for the row, or its memory model rejects the load."""
    if not available():
        return PeerEstimate(reason="aiconfigurator-core is not installed")
    path = aic_model(model_name) or aic_model(q.model.name)
    system = COMM_SYSTEMS.get(q.hardware.name)
    backend = BACKENDS.get(q.engine.name)
    quant = _quant(path or "", q.precision)
    why = (
        (path is None and f"no aiconfigurator model config for {q.model.name}")
        or (system is None and f"no aiconfigurator system for {q.hardware.name}")
        or (backend is None and f"no aiconfigurator backend for engine {q.engine.name}")
        or (quant is None and f"no aiconfigurator quant mode for {q.precision}")
        or (metric not in METRICS + METRICS_MS and f"metric {metric} not mapped")
        or (
            q.output_len <= 1
            and metric in METRICS
            and "output_len 1: its agg throughput counts osl - 1 decoded tokens per request (zero here)"
        )
    )
    if why:
        return PeerEstimate(reason=why)
    from aiconfigurator_core.sdk.common import DefaultHFModels

    if path not in DefaultHFModels:
        return PeerEstimate(reason=f"{path} is not among aiconfigurator's registered models (offline)")
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    try:
        runner = _Runner(path, system, backend, q, *quant)
        dp = q.deployment.dp
        if concurrency is None:
            batch = _max_batch(runner, q.engine.max_batch_size)
            if batch is None:
                return PeerEstimate(reason="its memory model admits no batch", setup=runner.setup)
        else:
            batch = max(1, math.ceil(concurrency / dp))
        result, _ = runner.run(batch)
    except Exception as exc:  # aiconfigurator raises many kinds (missing tables, unsupported ops)
        return PeerEstimate(reason=f"aiconfigurator failed: {type(exc).__name__}: {str(exc)[:120]}")
    setup = f"{runner.setup} batch {batch}/rank"
    return PeerEstimate(value=_value(result, metric, q), setup=setup)
