"""`ServingQuery`: one serving configuration to evaluate, with its names resolved and its values checked once.

`estimate_inference`, `inference_curve`, `search_inference` and the serving validation all describe a
deployment the same way: model, GPU, deployment, request lengths, number formats, engine, speculative
decoding and price. Each builds one `ServingQuery` from its arguments and hands it on, so catalog names
are loaded, and bad values rejected, in this one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tenfold.perf.serving.kvcache import KV_PRECISIONS
from tenfold.perf.serving.presets import ENGINE_NAMES, Engine, engine
from tenfold.perf.serving.results import Deployment
from tenfold.perf.serving.step import Formats
from tenfold.perf.specs.hardware import Hardware, load_hardware
from tenfold.perf.specs.models import ModelSpec, load_model
from tenfold.perf.specs.precision import Precision, as_weight_only, check_supported, get_precision

WEIGHT_PRECISIONS = ("bf16", "fp16", "fp8", "fp8_block", "mxfp8", "nvfp4", "mxfp4")
# Weight formats whose published checkpoints are NVIDIA ModelOpt exports, whose hf_quant_config.json sets
# kv_cache_quant_algo FP8 (the nvidia/*-FP8, *-FP4 collection); MXFP4 is openai/gpt-oss's own checkpoint,
# which sets no KV scheme.
CHECKPOINT_KV_FP8 = ("fp8", "nvfp4", "mxfp8")


def default_activations(weights: str, hw: Hardware) -> str:
    """GEMM input format for a weight format: the same, except MXFP4 weights, which TensorRT-LLM runs as
    W4A8 (MXFP8 activations) on Blackwell and weight-only (BF16 activations) on Hopper (TensorRT-LLM tech
    blog 9, "Deploying GPT-OSS on TensorRT-LLM", in github.com/NVIDIA/TensorRT-LLM under
    docs/source/blogs/tech_blog/)."""
    if weights == "mxfp4":
        return "mxfp8" if "mxfp8" in hw.block_scaled_formats else "bf16"
    return weights


def default_attention(weights: str) -> str:
    """Format of the attention projections when not given: the weights', except MXFP4: gpt-oss, the MXFP4
    checkpoint, quantizes only the MoE experts and keeps attention, router, embeddings and head in BF16
    (its config.json `quantization_config.modules_to_not_convert`; gpt-oss model card, arXiv 2508.10925)."""
    return "bf16" if weights == "mxfp4" else weights


def auto_kv_precision(weights: str) -> tuple[str, str]:
    """KV-cache format for kv_precision "auto", and why. All three engines follow the checkpoint: its
    quantization config's `kv_cache_quant_algo` FP8 gives an FP8 cache, anything else the model dtype (BF16):
    vLLM `resolve_kv_cache_dtype_string` (vllm/utils/torch_utils.py, ModelOpt configs), SGLang
    `ModelRunner.configure_kv_cache_dtype` (python/sglang/srt/model_executor/model_runner.py: "auto" ->
    float8_e4m3fn if kv_cache_quant_algo is "FP8", else the model dtype), TensorRT-LLM's
    `KvCacheConfig(dtype="auto")`, which takes the hf_quant_config.json kv_cache_quant_algo (its perf
    tables run Hopper gpt-oss with "dtype: auto" for that reason, docs/source/developer-guide/
    perf-overview.md). tenfold knows the checkpoint only by its weight format (CHECKPOINT_KV_FP8)."""
    if weights in CHECKPOINT_KV_FP8:
        return "fp8", f"kv auto: {weights} weights are a ModelOpt checkpoint with kv_cache_quant_algo FP8"
    return "bf16", f"kv auto: {weights} checkpoint sets no KV scheme, so the model dtype (bf16)"


def checkpoint_format(name: str, model: ModelSpec) -> str:
    """The format `name` weights take for `model`: "fp8" means the model's FP8 checkpoint, which for
    DeepSeek-V3/R1 is 128 x 128 block-scaled (ModelSpec.fp8_format, cited in the catalog); an explicit
    "fp8_block" or any other name is kept."""
    return model.fp8_format if name == "fp8" else name


def as_run(p: Precision, eng: Engine) -> Precision:
    """`p` as the engine's kernels run it: block scales cost nothing where they overlap the MMAs
    (Engine.hidden_block_scales, DeepGEMM)."""
    if p.software_block_scales and eng.hidden_block_scales:
        return replace(p, software_block_scales=False)
    return p


def resolve_format(name: str, hw: Hardware, eng: Engine) -> Precision:
    """The format a GEMM with `name` weights runs in: `name` itself where `hw` has its tensor cores, else
    its weight-only form (BF16 math) if the engine supports that (presets.py), else `name` (the estimate
    then reports the missing tensor cores)."""
    p = get_precision(name)
    if check_supported(p, hw) and name in eng.weight_only:
        return as_weight_only(p)
    return as_run(p, eng)


def weight_only_note(names: list[str], roles: list[str], hw: Hardware, eng: Engine) -> str:
    """What the estimate says about formats `hw` has no tensor cores for: that they run weight-only, or
    which engines would run them so."""
    if not names:
        return ""
    which = " and ".join(roles)
    fmts = "/".join(dict.fromkeys(names))
    if all(n in eng.weight_only for n in names):
        bits = "/".join(f"W{round(get_precision(n).operand_bytes * 8)}A16" for n in dict.fromkeys(names))
        return (
            f"runs weight-only ({bits}): {which} weights stay {fmts} in memory and HBM traffic, but "
            f"{hw.name} has no {fmts} tensor cores, so {eng.name} dequantises them into BF16 GEMMs"
        )
    others = [n for n in ENGINE_NAMES if all(f in engine(n).weight_only for f in names)]
    alt = f"; {', '.join(others)} can run {fmts} weight-only there" if others else ""
    return f"{eng.name} does not run {fmts} {which} weights weight-only on {hw.name}{alt}"


@dataclass(frozen=True, kw_only=True)
class ServingQuery:
    """One serving configuration (what to serve, on what, how), independent of concurrency.

    Fields:
        model: the model, or its catalog name (loaded on construction).
        hardware: the GPU, or its catalog name (loaded on construction).
        deployment: TP / attention-DP / EP of one instance (default TP1).
        input_len, output_len: tokens per request (ISL, OSL), each >= 1.
        precision: weight format of the FFN and expert GEMMs, one of WEIGHT_PRECISIONS.
        activations: input format of those GEMMs (sets the tensor-core rate); None = default_activations.
        attention_precision: format of the attention projections; None = default_attention.
        kv_precision: KV-cache format, one of KV_PRECISIONS, or "auto" (auto_kv_precision).
        engine: serving-engine preset, or its name (resolved on construction; presets.py).
        draft_tokens: tokens the model's MTP module drafts per step (0 = no speculative decoding).
        accepted_tokens: mean tokens accepted per step, 1 <= accepted_tokens <= 1 + draft_tokens.
        usd_per_gpu_hour: price for the cost per million tokens; None = the catalog's on-demand price.
        formats: derived on construction, the number formats resolved (weights, activations, attention, kv);
            a format the GPU lacks tensor cores for runs weight-only where the engine supports it.
        notes: derived on construction, what was resolved (weight-only execution, the KV "auto" rule).

    Raises ValueError naming the bad value. Whether the GPU supports the formats, and whether the model
    fits, are not input errors: the estimate reports them as infeasible.
    """

    model: ModelSpec | str
    hardware: Hardware | str
    deployment: Deployment = field(default_factory=Deployment)
    input_len: int
    output_len: int
    precision: str = "bf16"
    activations: str | None = None
    attention_precision: str | None = None
    kv_precision: str = "bf16"
    engine: Engine | str = "trtllm"
    draft_tokens: int = 0
    accepted_tokens: float = 1.0
    usd_per_gpu_hour: float | None = None
    formats: Formats = field(init=False, repr=False, compare=False)
    notes: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # frozen: names are replaced by what they name once, here (object.__setattr__ is the only way in)
        if isinstance(self.model, str):
            object.__setattr__(self, "model", load_model(self.model))
        if isinstance(self.hardware, str):
            object.__setattr__(self, "hardware", load_hardware(self.hardware))
        if isinstance(self.engine, str):
            object.__setattr__(self, "engine", engine(self.engine))
        if self.input_len < 1 or self.output_len < 1:
            raise ValueError(
                f"input_len and output_len must be >= 1, got {self.input_len} and {self.output_len}"
            )
        for label, name, allowed in (
            ("precision", self.precision, WEIGHT_PRECISIONS),
            ("attention_precision", self.attention_precision or self.precision, WEIGHT_PRECISIONS),
            ("kv_precision", self.kv_precision, (*KV_PRECISIONS, "auto")),
        ):
            if name not in allowed:
                raise ValueError(f"{label} {name!r} not in {allowed}")
        if self.draft_tokens < 0:
            raise ValueError(f"draft_tokens must be >= 0, got {self.draft_tokens}")
        if not 1.0 <= self.accepted_tokens <= 1 + self.draft_tokens:
            raise ValueError(
                f"accepted_tokens must be in [1, 1 + draft_tokens = {1 + self.draft_tokens}], "
                f"got {self.accepted_tokens}"
            )
        object.__setattr__(self, "accepted_tokens", float(self.accepted_tokens))
        formats, notes = self._resolve_formats()
        object.__setattr__(self, "formats", formats)
        object.__setattr__(self, "notes", notes)

    def _resolve_formats(self) -> tuple[Formats, tuple[str, ...]]:
        """The formats each GEMM and the cache run in, with notes on what was resolved."""
        hw, eng, model = self.hardware, self.engine, self.model
        names, roles = [], []  # formats hw has no tensor cores for, and which GEMMs use them
        w_name = checkpoint_format(self.precision, model)
        w = as_run(get_precision(w_name), eng)
        if self.activations:
            act = get_precision(checkpoint_format(self.activations, model))
        elif check_supported(w, hw):  # no tensor cores for the weights: weight-only, or refused
            names.append(w_name)
            roles.append("FFN/expert")
            act = get_precision("bf16") if w_name in eng.weight_only else w
        else:
            act = get_precision(default_activations(w_name, hw))
        attn_name = checkpoint_format(self.attention_precision or default_attention(w_name), model)
        attn = resolve_format(attn_name, hw, eng)
        if check_supported(get_precision(attn_name), hw):
            names.append(attn_name)
            roles.append("attention")
        notes = [weight_only_note(names, roles, hw, eng)]
        if w_name != self.precision:
            notes.append(
                f"{self.precision} weights: {model.name}'s FP8 checkpoint is {w_name} (128x128 scales)"
            )
        kv = self.kv_precision
        if kv == "auto":
            kv, why = auto_kv_precision(w_name)
            notes.append(why)
        fmts = Formats(weights=w, activations=act, attention=attn, kv=kv)
        return fmts, tuple(n for n in notes if n)

    @property
    def weight_only(self) -> bool:
        """Whether some GEMM reads low-bit weights into 16-bit math (W4A16, W8A16)."""
        f = self.formats
        return f.attention.weight_only or (f.weights.low and not f.activations.low)

    @property
    def tokens_per_step(self) -> float:
        """Tokens each running sequence feeds one engine step: 1 + the drafted tokens (q in step.py)."""
        return 1.0 + self.draft_tokens
