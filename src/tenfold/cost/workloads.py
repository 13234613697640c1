"""What a comparison is asked about: a training run or a serving load, the cost settings, the precisions
each GPU may use, and the embedded default scenario (`tenfold compare` with no arguments)."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from types import MappingProxyType

from tenfold.cost.defaults import CostDefaults, grid_intensity
from tenfold.cost.tco import OWN_KEYS, RENT_BASES, check_own_input
from tenfold.perf.defaults import TRAINING
from tenfold.perf.flops import SECONDS_PER_DAY
from tenfold.perf.specs.hardware import Hardware
from tenfold.perf.specs.models import load_model
from tenfold.perf.specs.precision import check_supported, get_precision
from tenfold.perf.training.stack import stack

DEFAULT_GPUS = ("h100-sxm", "h200", "b200", "gb200", "gb300")
HOPPER_PRECISIONS = ("bf16", "fp8")
BLACKWELL_PRECISIONS = ("fp8", "mxfp8", "nvfp4")


COUNT_SCALES = (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3))
"""Suffixes of a count (tokens): SI-style K, M, B (G accepted on input), T."""
_GROUPED = re.compile(r"\d{1,3}(,\d{3})+(\.\d*)?")


def parse_count(text: str) -> float:
    """'15.6T', '300B', '2e12', '15,600,000' -> a positive number. Suffixes K, M, B (or G), T; commas only
    as thousands separators (groups of three), so '15,6T' is an error rather than 156T."""
    t = text.strip().upper().replace("_", "")
    scale = 1.0
    suffixes = dict(COUNT_SCALES) | {"G": 1e9}
    if t and t[-1] in suffixes:
        scale, t = suffixes[t[-1]], t[:-1]
    if "," in t:
        if not _GROUPED.fullmatch(t):
            raise ValueError(f"not a count: {text!r} (commas only between groups of three digits; 15.6T)")
        t = t.replace(",", "")
    try:
        v = float(t) * scale
    except ValueError:
        raise ValueError(f"not a count: {text!r} (use e.g. 15.6T, 300B or 2e12)") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"count must be a positive number, got {text!r}")
    return v


def format_count(x: float) -> str:
    """A count at a readable scale: 15.6T, 300B, 15K, 950 (4 significant digits; the inverse of
    parse_count up to rounding)."""
    for unit, scale in COUNT_SCALES:
        if abs(x) >= scale:
            return f"{x / scale:.4g}{unit}"
    return f"{x:.4g}"


def precisions_for(hw: Hardware, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """Precisions a comparison tries on `hw`: fp8 / mxfp8 / nvfp4 where the GPU has block-scaled tensor
    cores (Blackwell), bf16 / fp8 otherwise (Hopper), keeping those it supports; `allowed` restricts them."""
    base = BLACKWELL_PRECISIONS if hw.block_scaled_formats else HOPPER_PRECISIONS
    if allowed is not None:
        for p in allowed:
            get_precision(p)  # ValueError for an unknown name
        base = tuple(p for p in allowed)
    return tuple(p for p in base if not check_supported(get_precision(p), hw))


def training_days(tokens: float, tokens_per_s: float) -> float:
    """Wall-clock days to train on `tokens` at a whole-cluster rate of `tokens_per_s`:
    days = tokens / (tokens/s) / 86,400 s per day."""
    return tokens / tokens_per_s / SECONDS_PER_DAY


def _positive(name: str, v: float) -> None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a positive number, got {v!r}")


@dataclass(frozen=True, kw_only=True)
class TrainingWorkload:
    """A pre-training run. Fields: model (catalog name), tokens to train on, seq_len, global_batch
    (sequences per step), software stack preset, headroom_GiB (memory per GPU each plan leaves outside the
    model; None: what the framework needs), label and source (where the token count comes from)."""

    model: str
    tokens: float
    seq_len: int = TRAINING.seq_len
    global_batch: int = TRAINING.global_batch
    software: str = TRAINING.software
    headroom_GiB: float | None = None
    label: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        load_model(self.model)
        stack(self.software)
        _positive("tokens", self.tokens)
        for key in ("seq_len", "global_batch"):
            v = getattr(self, key)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{key} must be an integer >= 1, got {v!r}")
        if self.headroom_GiB is not None and not 0 <= self.headroom_GiB < 1024:
            raise ValueError(f"headroom_GiB must be 0 to 1,024 GiB, got {self.headroom_GiB!r}")

    @property
    def kind(self) -> str:
        return "training"

    def to_dict(self) -> dict:
        return asdict(self) | {"kind": self.kind}


@dataclass(frozen=True, kw_only=True)
class ServingWorkload:
    """A serving load. Fields: model, input_len / output_len (tokens per request), output_tokens_per_s
    (aggregate demand), the interactivity target min_tokens_per_s_per_user and max_ttft_s, days of serving
    to cost, engine preset, label and source."""

    model: str
    input_len: int
    output_len: int
    output_tokens_per_s: float
    min_tokens_per_s_per_user: float
    max_ttft_s: float
    days: float = 30.0
    engine: str = "trtllm"
    label: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        load_model(self.model)
        for key in ("input_len", "output_len"):
            v = getattr(self, key)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{key} must be an integer >= 1, got {v!r}")
        for key in ("output_tokens_per_s", "min_tokens_per_s_per_user", "max_ttft_s", "days"):
            _positive(key, getattr(self, key))

    @property
    def kind(self) -> str:
        return "serving"

    def to_dict(self) -> dict:
        return asdict(self) | {"kind": self.kind}


@dataclass(frozen=True, kw_only=True)
class CostSettings:
    """How a comparison prices GPU-hours. Fields:
    rent_basis: "reserved" (multi-week runs buy commitments) or "ondemand".
    grid: carbon preset name (us, world, france, ...) or g CO2/kWh.
    own: overrides of the owner's inputs shared by every GPU (life_years, cost_of_capital, pue, ...).
    per_gpu: overrides per GPU name, {gpu: {key: value}} with keys ondemand_usd_h, reserved_usd_h,
        capex_usd, it_kW.
    """

    rent_basis: str = "reserved"
    grid: str | float = "us"
    own: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    per_gpu: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if self.rent_basis not in RENT_BASES:
            raise ValueError(f"rent_basis {self.rent_basis!r} not in {RENT_BASES}")
        bad = sorted(set(self.own) - set(OWN_KEYS))
        if bad:
            raise ValueError(f"unknown own-cost override(s) {', '.join(bad)}; known: {', '.join(OWN_KEYS)}")
        for key, v in self.own.items():
            check_own_input(key, v)
        gpu_keys = {"ondemand_usd_h", "reserved_usd_h", "capex_usd", "it_kW"}
        for gpu, keys in self.per_gpu.items():
            bad = sorted(set(keys) - gpu_keys)
            if bad:
                raise ValueError(f"unknown override(s) {', '.join(bad)} for {gpu}; known: {sorted(gpu_keys)}")
            for key, v in keys.items():
                if isinstance(v, bool) or not isinstance(v, int | float) or not (math.isfinite(v) and v >= 0):
                    raise ValueError(f"{gpu} {key} must be a finite number >= 0, got {v!r}")
        object.__setattr__(self, "own", MappingProxyType(dict(self.own)))
        object.__setattr__(self, "per_gpu", MappingProxyType({k: dict(v) for k, v in self.per_gpu.items()}))

    def check_gpus(self, names: list[str] | tuple[str, ...]) -> None:
        """ValueError when a per-GPU override names a GPU that is not among `names` (it would be ignored)."""
        stray = sorted(set(self.per_gpu) - set(names))
        if stray:
            raise ValueError(
                f"price override for {', '.join(stray)}, which is not compared; compared: {', '.join(names)}"
            )

    def grid_g_per_kWh(self, defaults: CostDefaults | None = None) -> float:
        return grid_intensity(self.grid, defaults)

    def to_dict(self) -> dict:
        return {
            "rent_basis": self.rent_basis,
            "grid": self.grid,
            "own": dict(self.own),
            "per_gpu": {k: dict(v) for k, v in self.per_gpu.items()},
        }


# ---- the embedded default: the article's scenario plus Llama 3.1 405B -------------------------------
GPT_MOE_TOKENS_SOURCE = (
    "~13T tokens, 8K pre-training context and a batch ramped to ~60M tokens (here 8,192 x 8,192 = 67M): "
    "SemiAnalysis's July 2023 GPT-4 description that the catalog's GPT-MoE-1.8T shape follows, as "
    "summarised at https://www.kdnuggets.com/2023/07/gpt4-details-leaked.html (low confidence; NVIDIA "
    "publishes no token count); 8,192 GPUs ~ the GTC-2024 keynote's 8,000 Hopper GPUs for 90 days"
)
LLAMA_TOKENS_SOURCE = (
    "15.6T tokens, 8K sequences, 16M-token batches on 16K H100s (Llama 3 paper, arXiv 2407.21783, Table 4)"
)


def default_scenario() -> tuple[tuple[TrainingWorkload, int], ...]:
    """(workload, GPU count) pairs `tenfold compare` runs with no arguments."""
    return (
        (
            TrainingWorkload(
                model="gpt-moe-1.8t",
                tokens=13e12,
                seq_len=8192,
                global_batch=8192,
                label="GPT-MoE-1.8T pre-training (the article's scenario)",
                source=GPT_MOE_TOKENS_SOURCE,
            ),
            8192,
        ),
        (
            TrainingWorkload(
                model="llama3.1-405b",
                tokens=15.6e12,
                seq_len=8192,
                global_batch=2048,
                label="Llama 3.1 405B pre-training",
                source=LLAMA_TOKENS_SOURCE,
            ),
            16384,
        ),
    )
