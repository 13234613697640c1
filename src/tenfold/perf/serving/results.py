"""The serving model's inputs and results as frozen dataclasses: `Deployment` (how an instance spreads a
model over its GPUs), `InferenceEstimate` (one configuration at one concurrency), `InferenceCurve` (the
throughput-versus-interactivity curve). Computed by estimate.py and curve.py."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from tenfold.perf.errors import Infeasible
from tenfold.perf.specs.models import ModelSpec
from tenfold.perf.uncertainty import LEVEL

STEP_PARTS = ("attn_proj", "attention", "ffn", "tp", "ep", "pp", "head", "draft", "overhead")
INTERVAL_FIELDS = (
    "output_tokens_per_s_per_gpu",
    "total_tokens_per_s_per_gpu",
    "output_tokens_per_s_per_user",
    "ttft_s",
    "tpot_s",
    "usd_per_m_output_tokens",
    "usd_per_m_total_tokens",
)
"""Quantities of an estimate that carry an 80 % range (each scales with the modelled step time)."""

# Latencies stay in seconds inside the model; results print them in milliseconds, the unit serving
# benchmarks report (InferenceMAX, TensorRT-LLM's perf tables) and the keys `--json` always had.
MS_FIELDS = {f"{k}_s": f"{k}_ms" for k in ("ttft", "tpot", "step_time", "max_ttft")}


def latencies_in_ms(d: dict) -> dict:
    """A result's dict (asdict) with its latency fields converted to milliseconds under `_ms` names, in
    place order; the one place serving results leave seconds (the JSON edge)."""
    return {MS_FIELDS.get(k, k): v * 1e3 if k in MS_FIELDS else v for k, v in d.items()}


@dataclass(frozen=True, kw_only=True)
class Deployment:
    """How one serving instance spreads a model over its GPUs (GPUs = tp·dp·pp).

    Fields:
        tp: attention tensor parallelism (heads and their KV split over tp ranks).
        dp: attention data parallelism: dp attention replicas, each with its own batch and KV cache
            (TensorRT-LLM `enable_attention_dp`, SGLang DP attention); requires tp = 1.
        ep: expert parallelism over one pipeline stage's tp·dp GPUs; the remaining factor tp·dp/ep splits
            each expert (expert tensor parallelism, TensorRT-LLM's `--tp 8 --ep 2` = experts TP4 x EP2).
        pp: pipeline parallelism: the layers split into pp consecutive stages of tp·dp GPUs each (vLLM
            `--pipeline-parallel-size`, SGLang `--pp-size`, TensorRT-LLM `pipeline_parallel_size`); each
            stage holds its layers' weights and KV cache, and pp micro-batches are in flight
            (steady_state.py).
        redundant_experts: extra expert slots a load balancer fills with copies of busy experts (DeepSeek's
            EPLB; SGLang `--ep-num-redundant-experts`): E + r slots over ep ranks, which lets EP sizes
            that do not divide E run (256 + 32 = 288 slots over EP72,
            https://lmsys.org/blog/2025-05-05-large-scale-ep). Only the divisibility check uses it; the
            copies' weight memory (r/E of the experts) is not counted.

    More GPUs than tp·dp·pp without attention DP are independent replicas of this instance: they never
    exchange anything, so per-GPU rates and per-request latencies are one instance's at its share of the
    load (the serving validation resolves rows that way).
    """

    tp: int = 1
    dp: int = 1
    ep: int = 1
    pp: int = 1
    redundant_experts: int = 0

    def __post_init__(self) -> None:
        for key in ("tp", "dp", "ep", "pp"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.redundant_experts < 0:
            raise ValueError(f"redundant_experts must be >= 0, got {self.redundant_experts}")

    @property
    def gpus(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def stage_gpus(self) -> int:
        """GPUs of one pipeline stage (tp·dp), the group attention, TP and EP run over."""
        return self.tp * self.dp

    @property
    def moe_tp(self) -> int:
        return self.stage_gpus // self.ep

    def describe(self) -> str:
        pp = f" PP{self.pp}" if self.pp > 1 else ""
        if self.dp > 1:
            text = (
                f"DEP{self.stage_gpus} (attention DP{self.dp}, EP{self.ep})"
                if self.ep > 1
                else f"DP{self.dp}"
            )
            return text + pp
        text = f"TP{self.tp}"
        if self.ep > 1:
            text += f" EP{self.ep}" + (f" (expert TP{self.moe_tp})" if self.moe_tp > 1 else "")
        return text + pp

    def problems(self, model: ModelSpec) -> list[str]:
        """Structural reasons this deployment cannot run the model (numbers printed)."""
        out = []
        if self.stage_gpus % self.ep:
            out.append(f"EP={self.ep} does not divide the {self.stage_gpus} GPUs of a stage (tp·dp)")
        if self.ep > 1 and not model.is_moe:
            out.append(f"EP={self.ep} needs an MoE model; {model.name} is dense")
        if self.dp > 1 and self.tp > 1:
            out.append(f"attention DP{self.dp} with TP{self.tp} is not modelled (attention DP uses tp = 1)")
        if self.dp > 1 and model.is_moe and self.moe_tp > 1:
            out.append(f"attention DP with expert TP{self.moe_tp} is not modelled (use ep = tp·dp)")
        if self.dp > 1 and self.pp > 1:
            out.append(f"attention DP{self.dp} with PP{self.pp} is not modelled")
        if self.pp > model.layers:
            out.append(f"PP={self.pp} exceeds the {model.layers} layers")
        if model.heads % self.tp:
            out.append(f"TP={self.tp} does not divide {model.heads} attention heads")
        if not model.is_mla and model.kv_heads % self.tp and self.tp % model.kv_heads:
            out.append(f"TP={self.tp} and {model.kv_heads} KV heads: neither divides the other")
        slots = model.experts + self.redundant_experts
        if model.is_moe and slots % self.ep:
            extra = f" + {self.redundant_experts} redundant" if self.redundant_experts else ""
            out.append(f"EP={self.ep} does not divide {model.experts}{extra} experts")
        return out


@dataclass(frozen=True, kw_only=True)
class ServingStepBreakdown:
    """Seconds of one engine step on one GPU; the fields sum to `step_s`."""

    attn_proj_s: float
    attention_s: float
    ffn_s: float
    tp_s: float
    ep_s: float
    head_s: float
    draft_s: float
    overhead_s: float
    step_s: float
    pp_s: float = 0.0
    """Stage-to-stage activation sends under pipeline parallelism (0 without)."""


@dataclass(frozen=True, kw_only=True)
class InferenceEstimate:
    """One serving configuration at one concurrency. Rates are NaN when infeasible.

    concurrency: requests in flight the estimate is for (the capacity when none was given);
    batch_per_rank: sequences the busiest attention rank runs; capacity: the most the instance runs at
    once and `limited_by` what sets it (kv_memory, max_batch_size, max_num_tokens);
    output_tokens_per_s_per_gpu counts generated tokens, total_tokens_per_s_per_gpu input + output;
    usd_per_m_output_tokens / usd_per_m_total_tokens the cost per million tokens of each kind at
    usd_per_gpu_hour; ttft_s, tpot_s and step_time_s in seconds (`to_dict` gives them in ms).

    interval: the 80 % range of output_tokens_per_s_per_gpu, from the inference calibration's
    cross-validated error for this engine family and dense/MoE model (`uncertainty_group`,
    tenfold.perf.uncertainty); interval_factor f gives the same range for any rate, time or cost v as
    [v / f, v x f] (`scaled_interval`). NaN when the calibration carries no uncertainty.
    """

    model: str
    hardware: str
    deployment: Deployment
    precision: str
    activations: str
    attention_precision: str
    kv_precision: str
    engine: str
    input_len: int
    output_len: int
    draft_tokens: int
    accepted_tokens: float
    num_gpus: int
    feasible: bool
    reason: str
    concurrency: int
    batch_per_rank: int
    capacity: int
    limited_by: str
    ttft_s: float
    tpot_s: float
    step_time_s: float
    output_tokens_per_s_per_gpu: float
    total_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_user: float
    usd_per_gpu_hour: float
    usd_per_m_output_tokens: float
    usd_per_m_total_tokens: float
    weights_GiB: float
    workspace_GiB: float
    kv_budget_GiB: float
    kv_per_sequence_GiB: float
    capacity_GiB: float
    breakdown: ServingStepBreakdown | None
    calibrated: bool
    notes: tuple[str, ...] = field(default_factory=tuple)
    interval: tuple[float, float] = (math.nan, math.nan)
    interval_factor: float = math.nan
    uncertainty_group: str = ""

    def raise_if_infeasible(self) -> InferenceEstimate:
        if not self.feasible:
            raise Infeasible(self.reason)
        return self

    def scaled_interval(self, value: float) -> tuple[float, float]:
        """80 % range of a quantity that scales with this estimate's rates or times: [v / f, v x f]
        (NaN, NaN without a measured uncertainty)."""
        f = self.interval_factor
        return value / f, value * f

    def interval_fields(self) -> dict[str, list[float] | None]:
        """{"<key>_interval": [low, high] or None} for the rates, latencies (ms) and costs, and the level
        (the JSON fields; None without a measured uncertainty or when infeasible)."""
        ranged = math.isfinite(self.interval_factor) and self.feasible
        out: dict = {}
        for key in INTERVAL_FIELDS:
            v = getattr(self, key)
            name = MS_FIELDS.get(key, key)
            scale = 1e3 if key in MS_FIELDS else 1.0
            out[f"{name}_interval"] = [x * scale for x in self.scaled_interval(v)] if ranged else None
        out["interval_level"] = LEVEL if ranged else None
        return out

    def to_dict(self) -> dict:
        """JSON-ready, latencies in ms (`ttft_ms`, `tpot_ms`, `step_time_ms`), with `<key>_interval`."""
        d = latencies_in_ms(asdict(self))
        d["interval"] = list(self.interval) if math.isfinite(self.interval_factor) else None
        d |= self.interval_fields()
        d["notes"] = list(self.notes)
        d["token_kinds"] = {
            "usd_per_m_output_tokens": "generated tokens only",
            "usd_per_m_total_tokens": "input + output tokens",
        }
        return d


@dataclass(frozen=True, kw_only=True)
class CurvePoint:
    """One concurrency on the throughput-versus-interactivity curve (ttft_s, tpot_s in seconds)."""

    concurrency: int
    batch_per_rank: int
    saturated: bool
    output_tokens_per_s_per_gpu: float
    total_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_user: float
    ttft_s: float
    tpot_s: float
    usd_per_m_output_tokens: float


@dataclass(frozen=True, kw_only=True)
class InferenceCurve:
    """tok/s/GPU against tok/s/user over concurrency for one configuration (plot y against x)."""

    model: str
    hardware: str
    deployment: Deployment
    precision: str
    kv_precision: str
    engine: str
    input_len: int
    output_len: int
    capacity: int
    usd_per_gpu_hour: float
    points: tuple[CurvePoint, ...]
    calibrated: bool = True
    """False when the fit does not cover this GPU at every GEMM width it runs (a conservative efficiency is
    used; see `InferenceEstimate.calibrated`)."""
    x: str = "output_tokens_per_s_per_user"
    y: str = "output_tokens_per_s_per_gpu"

    def to_dict(self) -> dict:
        """JSON-ready, the points' latencies in ms."""
        d = asdict(self)
        d["points"] = [latencies_in_ms(asdict(p)) for p in self.points]
        return d
