"""`ServingQuery`: one serving configuration to evaluate, with its names resolved and its values checked once.

`estimate_inference`, `inference_curve`, `search_inference` and the serving validation all describe a
deployment the same way: model, GPU, deployment, request lengths, number formats, engine, speculative
decoding and price. Each builds one `ServingQuery` from its arguments and hands it on, so catalog names
are loaded, and bad values rejected, in this one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tenfold.perf.serving.kvcache import KV_PRECISIONS
from tenfold.perf.serving.presets import Engine, engine
from tenfold.perf.serving.results import Deployment
from tenfold.perf.serving.step import Formats
from tenfold.perf.specs.hardware import Hardware, load_hardware
from tenfold.perf.specs.models import ModelSpec, load_model
from tenfold.perf.specs.precision import get_precision

WEIGHT_PRECISIONS = ("bf16", "fp16", "fp8", "mxfp8", "nvfp4", "mxfp4")


def default_activations(weights: str, hw: Hardware) -> str:
    """GEMM input format for a weight format: the same, except MXFP4 weights, which TensorRT-LLM runs as
    W4A8 (MXFP8 activations) on Blackwell and weight-only (BF16 activations) on Hopper (TensorRT-LLM tech
    blog 9, "Deploying GPT-OSS on TensorRT-LLM", in github.com/NVIDIA/TensorRT-LLM under
    docs/source/blogs/tech_blog/)."""
    if weights == "mxfp4":
        return "mxfp8" if "mxfp8" in hw.block_scaled_formats else "bf16"
    return weights


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
        attention_precision: format of the attention projections; None = precision.
        kv_precision: KV-cache format, one of KV_PRECISIONS.
        engine: serving-engine preset, or its name (resolved on construction; presets.py).
        draft_tokens: tokens the model's MTP module drafts per step (0 = no speculative decoding).
        accepted_tokens: mean tokens accepted per step, 1 <= accepted_tokens <= 1 + draft_tokens.
        usd_per_gpu_hour: price for the cost per million tokens; None = the catalog's on-demand price.
        formats: derived on construction, the number formats resolved (weights, activations, attention, kv).

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
            ("kv_precision", self.kv_precision, KV_PRECISIONS),
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
        formats = Formats(
            weights=get_precision(self.precision),
            activations=get_precision(self.activations or default_activations(self.precision, self.hardware)),
            attention=get_precision(self.attention_precision or self.precision),
            kv=self.kv_precision,
        )
        object.__setattr__(self, "formats", formats)

    @property
    def tokens_per_step(self) -> float:
        """Tokens each running sequence feeds one engine step: 1 + the drafted tokens (q in step.py)."""
        return 1.0 + self.draft_tokens
