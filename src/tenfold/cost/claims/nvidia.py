"""NVIDIA's GB200 NVL72 claims and the article's estimate, reproduced with the model and decomposed.

A claim compares a baseline (HGX H100, FP8, 8-GPU NVLink islands joined by InfiniBand) with a target
(GB200 NVL72). The model runs a chain of configurations that changes one thing at a time:

    T0  H100, baseline precision, 8-GPU domain            (the claim's baseline)
    T1  GB200 GPU, baseline precision, 8-GPU domain        (counterfactual: NVL72's GPU, HGX-sized domain)
    T2  GB200 GPU, baseline precision, 72-GPU domain       (NVL72)
    T3  GB200 GPU, target precision, 72-GPU domain         (the claim's target; when the precisions agree
                                                           T3 = T2, it is not run and util (p1) is dropped)

and the ratio T3/T0 (per-GPU throughput, same GPU count) splits exactly into

    spec        P_GB200(p0) / P_H100(p0)                    datasheet dense peaks at the baseline precision
    precision   P_GB200(p1) / P_GB200(p0)                   datasheet: what the lower precision buys at peak
    domain      T2 / T1                                     model: NVL72 versus an 8-GPU domain
    util (p0)   (T1 / P_GB200(p0)) / (T0 / P_H100(p0))      model: achieved share of peak, same precision
    util (p1)   (T3 / P_GB200(p1)) / (T2 / P_GB200(p0))     model: achieved share of peak, lower precision

Training throughput is tokens/s/GPU of the fastest layout (`search_training`); serving throughput is output
tokens/s/GPU at the claim's interactivity (`search_inference`). Claim conditions: NVIDIA's blog (CLAIM_URL),
the GB200 NVL72 page's footnotes (GB200_URL) and the Blackwell architecture technical brief (BRIEF_URL).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from tenfold.cost.claims.article import ArticleClaims, article_claims
from tenfold.cost.claims.speedups import SpeedupCheck, speedup_checks
from tenfold.perf.errors import Infeasible
from tenfold.perf.serving.kvcache import kv_bytes_per_sequence
from tenfold.perf.serving.search import search_inference
from tenfold.perf.specs.hardware import Hardware, load_hardware
from tenfold.perf.specs.models import load_model
from tenfold.perf.specs.precision import get_precision
from tenfold.perf.training.search import search_training

CLAIM_URL = "https://developer.nvidia.com/blog/nvidia-gb200-nvl72-delivers-trillion-parameter-llm-training-and-real-time-inference/"
GB200_URL = "https://www.nvidia.com/en-us/data-center/gb200-nvl72/"
BRIEF_URL = "https://resources.nvidia.com/en-us-blackwell-architecture"
MLPERF_TRAINING_V50_URL = "https://developer.nvidia.com/blog/nvidia-blackwell-delivers-up-to-2-6x-higher-performance-in-mlperf-training-v5-0/"
MEGATRON_BRIDGE_URL = "https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/main/docs/performance-summary.md"


@dataclass(frozen=True, kw_only=True)
class Step:
    """One configuration of the chain: its throughput per GPU and the plan that gives it."""

    label: str
    hardware: str
    precision: str
    domain: int
    tokens_per_s_per_gpu: float
    plan: str
    peak_flops: float


@dataclass(frozen=True, kw_only=True)
class Factor:
    name: str
    value: float
    source: str  # "datasheet" or "model"
    meaning: str


@dataclass(frozen=True, kw_only=True)
class Decomposition:
    """A claim, the model's chain and its factors; `model_ratio` = T3/T0 = the product of the factors."""

    claim: str
    claimed: float
    conditions: str
    source: str
    steps: tuple[Step, ...]
    factors: tuple[Factor, ...]
    model_ratio: float
    notes: tuple[str, ...] = ()

    @property
    def product(self) -> float:
        return math.prod(f.value for f in self.factors)

    def to_dict(self) -> dict:
        return asdict(self) | {"product_of_factors": self.product}


def _factors(
    hw0: Hardware, hw1: Hardware, p0: str, p1: str, t: tuple[float, ...], *, serving: bool = False
) -> tuple[Factor, ...]:
    k0, k1 = get_precision(p0).peak_key, get_precision(p1).peak_key
    ph, pg0, pg1 = hw0.peak(k0), hw1.peak(k0), hw1.peak(k1)
    t0, t1, t2, t3 = t
    out = (
        Factor(
            name="per-GPU spec ratio",
            value=pg0 / ph,
            source="datasheet",
            meaning=f"dense {k0.upper()} peak {pg0 / 1e12:,.0f} vs {ph / 1e12:,.0f} TFLOP/s",
        ),
        Factor(
            name="precision",
            value=pg1 / pg0,
            source="datasheet",
            meaning=f"{p1} vs {p0} peak on {hw1.name}" if p1 != p0 else f"{p0} on both: no precision gain",
        ),
        Factor(
            name="scale-up domain",
            value=t2 / t1,
            source="model",
            meaning=f"{hw1.scaleup_domain}-GPU NVLink domain vs an 8-GPU one, same GPU and {p0}",
        ),
        Factor(
            name=f"utilisation ({p0})",
            value=(t1 / pg0) / (t0 / ph),
            source="model",
            meaning=f"share of peak reached on {hw1.name} vs {hw0.name}, both in 8-GPU domains"
            + (
                " (decode is bound by HBM bandwidth and capacity, not FLOP/s; near a GPU's interactivity "
                "ceiling its batch, and so this share, collapses)"
                if serving
                else ""
            ),
        ),
        Factor(
            name=f"utilisation ({p1})",
            value=(t3 / pg1) / (t2 / pg0),
            source="model",
            meaning=f"share of peak kept when moving to {p1}",
        ),
    )
    return out if p1 != p0 else out[:-1]  # one precision: no second utilisation factor


def _chain(hw0: Hardware, hw1: Hardware, p0: str, p1: str) -> list[tuple[str, Hardware, str]]:
    hw1_8 = replace(hw1, scaleup_domain=hw0.scaleup_domain)
    return [
        (f"{hw0.name} {p0}, {hw0.scaleup_domain}-GPU domain", hw0, p0),
        (f"{hw1.name} {p0}, {hw0.scaleup_domain}-GPU domain (counterfactual)", hw1_8, p0),
        (f"{hw1.name} {p0}, {hw1.scaleup_domain}-GPU domain", hw1, p0),
        (f"{hw1.name} {p1}, {hw1.scaleup_domain}-GPU domain", hw1, p1),
    ]


def training_claim(
    *, num_gpus: int = 32768, seq_len: int = 8192, global_batch: int = 8192, progress=None
) -> Decomposition:
    """NVIDIA's 4x: GPT-MoE-1.8T trained in FP8 on 32,768 GPUs, HGX H100 over InfiniBand vs GB200 NVL72.
    NVIDIA states no sequence length or batch; the defaults are the GPT-4 description's 8K context and
    ~60M-token batch (workloads.GPT_MOE_TOKENS_SOURCE)."""
    hw0, hw1 = load_hardware("h100-sxm"), load_hardware("gb200")
    steps, t = [], []
    chain = _chain(hw0, hw1, "fp8", "fp8")
    for i, (label, hw, p) in enumerate(chain[:3]):  # T3 = T2: the claim keeps FP8 on both
        r = search_training(
            "gpt-moe-1.8t", hw, num_gpus, seq_len=seq_len, global_batch=global_batch, precision=p, top_k=1
        )
        if progress:
            progress(i + 1, 3)
        if not r.top:
            raise Infeasible(f"no layout of {num_gpus} GPUs fits for {label}")
        e = r.top[0]
        t.append(e.tokens_per_s_per_gpu)
        steps.append(
            Step(
                label=label,
                hardware=hw.name,
                precision=p,
                domain=hw.scaleup_domain,
                tokens_per_s_per_gpu=e.tokens_per_s_per_gpu,
                plan=e.layout.describe(),
                peak_flops=hw.peak(get_precision(p).peak_key),
            )
        )
    return Decomposition(
        claim="4x faster training (GB200 NVL72 vs HGX H100)",
        claimed=4.0,
        conditions=f"GPT-MoE-1.8T, FP8 on both, {num_gpus:,} GPUs, seq {seq_len}, batch {global_batch:,} "
        "sequences (sequence and batch assumed: NVIDIA states neither)",
        source=CLAIM_URL + " ; Blackwell technical brief v2.1, " + BRIEF_URL,
        steps=tuple(steps),
        factors=_factors(hw0, hw1, "fp8", "fp8", (*t, t[2])),
        model_ratio=t[2] / t[0],
        notes=(
            "measured for comparison: MLPerf Training v5.0 Llama 3.1 405B GB200 NVL72 = 2.2x Hopper at "
            f"equal GPU count ({MLPERF_TRAINING_V50_URL}); Megatron-Bridge 25.11 FP8 per GPU GB200/H100 = "
            f"2.78x (405B), 2.69x (70B) ({MEGATRON_BRIDGE_URL})",
        ),
    )


def _serve(hw: Hardware, p: str, per_user: float, ttft_ms: float, isl: int, osl: int):
    return search_inference(
        "gpt-moe-1.8t",
        hw,
        input_len=isl,
        output_len=osl,
        min_tokens_per_s_per_user=per_user,
        max_ttft_ms=ttft_ms,
        precision=p,
        kv_precision="fp8",
    )


@dataclass(frozen=True, kw_only=True)
class InferenceClaim:
    """The 30x claim: the decomposition at the evaluated interactivity, whether H100 reaches the claim's
    own interactivity, and the ratio T3/T0 over a sweep of interactivity targets."""

    decomposition: Decomposition
    target_tokens_per_s_per_user: float
    evaluated_tokens_per_s_per_user: float
    h100_reaches_target: bool
    h100_max_tokens_per_s_per_user: float
    sweep: tuple[tuple[float, float, float, float], ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return asdict(self) | {
            "decomposition": self.decomposition.to_dict(),
            "sweep": [
                {"tokens_per_s_per_user": a, "h100_fp8": b, "gb200_nvfp4": c, "ratio": d}
                for a, b, c, d in self.sweep
            ],
        }


def inference_claim(
    *,
    per_user: float = 20.0,
    ttft_s: float = 5.0,
    input_len: int = 32768,
    output_len: int = 1024,
    progress=None,
) -> InferenceClaim:
    """NVIDIA's 30x: GPT-MoE-1.8T at 20 tok/s/user (50 ms TPOT), TTFT 5 s, ISL 32,768, OSL 1,024, FP4 on
    GB200 NVL72 vs FP8 on HGX H100 over InfiniBand. If the model finds no H100 deployment at the claim's
    interactivity, the chain is evaluated at the most H100 reaches (the nearest point where it runs)."""
    hw0, hw1 = load_hardware("h100-sxm"), load_hardware("gb200")
    ttft_ms = ttft_s * 1e3
    base = _serve(hw0, "fp8", per_user, ttft_ms, input_len, output_len)
    reach = base.max_tokens_per_s_per_user
    ok = base.best is not None
    if not ok and not (reach > 0):
        raise ValueError(f"H100 cannot serve the claim's load at all: {base.reason}")
    at = per_user if ok else math.floor(reach * 100) / 100
    chain = _chain(hw0, hw1, "fp8", "nvfp4")
    steps, t = [], []
    for i, (label, hw, p) in enumerate(chain):
        s = _serve(hw, p, at, ttft_ms, input_len, output_len)
        if progress:
            progress(i + 1, len(chain) + 4)
        if s.best is None:
            raise Infeasible(f"{label}: {s.reason}")
        t.append(s.best.output_tokens_per_s_per_gpu)
        steps.append(
            Step(
                label=label,
                hardware=hw.name,
                precision=p,
                domain=hw.scaleup_domain,
                tokens_per_s_per_gpu=s.best.output_tokens_per_s_per_gpu,
                plan=f"{s.best.deployment.describe()} at concurrency {s.best.concurrency} "
                f"({s.best.output_tokens_per_s_per_user:.1f} tok/s/user, TTFT {s.best.ttft_s * 1e3:,.0f} ms)",
                peak_flops=hw.peak(get_precision(p).peak_key),
            )
        )
    sweep = []
    for j, target in enumerate(sorted({2.0, 5.0, 10.0, 15.0, at})):
        a = _serve(hw0, "fp8", target, ttft_ms, input_len, output_len).best
        b = _serve(hw1, "nvfp4", target, ttft_ms, input_len, output_len).best
        if progress:
            progress(len(chain) + min(j + 1, 4), len(chain) + 4)
        if a is not None and b is not None:
            sweep.append(
                (
                    target,
                    a.output_tokens_per_s_per_gpu,
                    b.output_tokens_per_s_per_gpu,
                    b.output_tokens_per_s_per_gpu / a.output_tokens_per_s_per_gpu,
                )
            )
    model = load_model("gpt-moe-1.8t")
    kv_seq = kv_bytes_per_sequence(model, "fp8", input_len + output_len, tp=1)
    notes = [
        f"HBM per GPU {hw1.name}/{hw0.name}: bandwidth {hw1.hbm_Bps / hw0.hbm_Bps:.2f}x, capacity "
        f"{hw1.hbm_bytes / hw0.hbm_bytes:.2f}x (what bounds decode; folded into the utilisation factor)",
        f"1.8T parameters in FP8 exceed one HGX H100 node ({8 * hw0.hbm_bytes / 1e9:,.0f} GB): H100 is "
        "served across nodes over InfiniBand: the search tries TP/EP over the network and pipeline stages "
        "across nodes (up to 8), and keeps the faster",
        "near a GPU's interactivity ceiling its batch falls to one or a few sequences and the ratio grows "
        "without bound: read it against the sweep below, not as one number",
        f"GPT-MoE-1.8T's attention is assumed GQA ({model.kv_heads} KV heads, catalog): its KV cache at ISL "
        f"{input_len:,} is {kv_seq / 1e9:,.0f} GB per sequence in FP8, which caps every GPU's batch",
    ]
    if not ok:
        notes.insert(
            0,
            f"H100 cannot reach {per_user:g} tok/s/user with TTFT <= {ttft_s:g} s in the model "
            f"({base.reason}); the chain is evaluated at {at:g} tok/s/user, the most it reaches",
        )
    dec = Decomposition(
        claim="30x real-time inference throughput per GPU (GB200 NVL72 FP4 vs HGX H100 FP8)",
        claimed=30.0,
        conditions=f"GPT-MoE-1.8T, {per_user:g} tok/s/user ({1e3 / per_user:.0f} ms TPOT), "
        f"TTFT {ttft_s:g} s, ISL {input_len:,}, OSL {output_len:,}, FP4 on GB200 vs FP8 on H100, "
        "FP8 KV cache",
        source=CLAIM_URL + " ; footnote of " + GB200_URL,
        steps=tuple(steps),
        factors=_factors(hw0, hw1, "fp8", "nvfp4", tuple(t), serving=True),
        model_ratio=t[3] / t[0],
        notes=tuple(notes),
    )
    return InferenceClaim(
        decomposition=dec,
        target_tokens_per_s_per_user=per_user,
        evaluated_tokens_per_s_per_user=at,
        h100_reaches_target=ok,
        h100_max_tokens_per_s_per_user=reach,
        sweep=tuple(sweep),
    )


@dataclass(frozen=True, kw_only=True)
class ClaimsReport:
    """Everything `tenfold claims` prints: the two NVIDIA claims decomposed, the article's estimate checked,
    and the model's per-GPU speedups beside the measured Megatron-Bridge pairs (what the claims are
    weighed against)."""

    training: Decomposition
    inference: InferenceClaim
    article: ArticleClaims
    measured: tuple[SpeedupCheck, ...]

    def to_dict(self) -> dict:
        return {
            "training": self.training.to_dict(),
            "inference": self.inference.to_dict(),
            "article": self.article.to_dict(),
            "measured": [c.to_dict() for c in self.measured],
        }


def check_claims(progress=None) -> ClaimsReport:
    """The training and inference claims, the article's estimate and the measured speedups
    (`progress(done, total)` per part)."""
    out = []
    for i, fn in enumerate((training_claim, inference_claim, article_claims, speedup_checks)):
        out.append(fn())
        if progress:
            progress(i + 1, 4)
    return ClaimsReport(training=out[0], inference=out[1], article=out[2], measured=tuple(out[3]))
