"""Request bodies of the web API: pydantic models whose bounds keep every request's work small.

Names are catalog names only (an enum in the OpenAPI schema), never a file: `load_model` and
`load_hardware` also accept a TOML path, and the web layer must never let a request name a path on the
server. Numbers carry `ge`/`le` bounds, so a bad value gets a 422 naming the field and the allowed range.

Defaults are the CLI's: training questions read `tenfold.perf.defaults.TRAINING` (sequence length,
global batch, precision, software, virtual-pipeline depth), and a layout field left out is the plain
layout of `tenfold estimate` (TP1 PP1 VP1 CP1 EP1 DP1, one sequence per micro-batch), never a tuned
one. Each request names in `ASSUMED` the fields that change its answer; every response returns them
with whether the request gave them or left them to the default (responses.assumptions).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tenfold.cost.defaults import load_cost_defaults
from tenfold.cost.workloads import DEFAULT_GPUS
from tenfold.perf.calibration import Calibration
from tenfold.perf.defaults import (  # the work bounds, shared with the CLI
    MAX_BATCH,
    MAX_COMPARE_GPUS,
    MAX_GPUS,
    MAX_SEQ,
    TRAINING,
)
from tenfold.perf.serving.kvcache import KV_PRECISIONS
from tenfold.perf.serving.presets import ENGINE_NAMES
from tenfold.perf.serving.query import WEIGHT_PRECISIONS
from tenfold.perf.specs.hardware import list_hardware
from tenfold.perf.specs.models import list_models
from tenfold.perf.specs.precision import PRECISIONS
from tenfold.perf.training.stack import STACK_NAMES
from tenfold.perf.validation.user import check_calibration_dict

# the shipped catalogs, read from package data (no probe of this machine)
MODEL_NAMES = tuple(list_models())
GPU_NAMES = tuple(list_hardware())
GRID_PRESETS = tuple(load_cost_defaults().grid)


ModelName = Literal[MODEL_NAMES]  # type: ignore[valid-type]
GpuName = Literal[GPU_NAMES]  # type: ignore[valid-type]
TrainPrecision = Literal[tuple(sorted(PRECISIONS))]  # type: ignore[valid-type]
WeightPrecision = Literal[WEIGHT_PRECISIONS]  # type: ignore[valid-type]
KvPrecision = Literal[(*KV_PRECISIONS, "auto")]  # type: ignore[valid-type]
EngineName = Literal[ENGINE_NAMES]  # type: ignore[valid-type]
SoftwareName = Literal[STACK_NAMES]  # type: ignore[valid-type]
GridPreset = Literal[GRID_PRESETS]  # type: ignore[valid-type]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ASSUMED: ClassVar[tuple[str, ...]] = ()
    """The fields that change the answer, stated in every response."""

    def assumed(self) -> tuple[str, ...]:
        """The fields that change this request's answer."""
        return self.ASSUMED

    def assumptions(self) -> dict[str, dict]:
        """Each field that changes the answer: its value, and whether the request left it to the default."""
        given = self.model_fields_set
        return {k: {"value": getattr(self, k), "default": k not in given} for k in self.assumed()}


class _TrainingBody(_Body):
    """A request the training model answers: it may carry the user's own calibration."""

    calibration: dict[str, Any] | None = Field(
        None,
        description="a training calibration as the tables of the file `tenfold calibrate training` writes "
        "({gemm_efficiency: {...}, parameters: {...}, fixed and fit optional}); null: the shipped fit",
    )

    @field_validator("calibration")
    @classmethod
    def _check_calibration(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None:
            check_calibration_dict(v)  # a ValueError here is a 422 naming `calibration`
        return v

    def user_calibration(self) -> Calibration | None:
        """The request's calibration (None: the shipped fit)."""
        return None if self.calibration is None else check_calibration_dict(self.calibration)


class TrainEstimateRequest(_TrainingBody):
    """One training plan (as `tenfold estimate train`); layout fields left out are the plain layout."""

    ASSUMED: ClassVar[tuple[str, ...]] = (
        "seq_len", "global_batch", "precision", "software",
        "tp", "pp", "dp", "cp", "ep", "vp", "micro_batch", "recompute", "zero", "calibration",
    )  # fmt: skip

    model: ModelName = "llama3-70b"
    gpu: GpuName = "h100-sxm"
    seq_len: int = Field(TRAINING.seq_len, ge=1, le=MAX_SEQ, description="tokens per sequence")
    global_batch: int = Field(
        TRAINING.global_batch, ge=1, le=MAX_BATCH, description="sequences per optimizer step"
    )
    tp: int = Field(1, ge=1, le=1024, description="tensor parallel")
    pp: int = Field(1, ge=1, le=1024, description="pipeline parallel")
    dp: int = Field(1, ge=1, le=MAX_GPUS, description="data parallel")
    cp: int = Field(1, ge=1, le=1024, description="context parallel")
    ep: int = Field(1, ge=1, le=1024, description="expert parallel")
    vp: int = Field(1, ge=1, le=64, description="virtual pipeline stages (1: no interleaving)")
    micro_batch: int = Field(1, ge=1, le=1024, description="sequences per micro-batch")
    recompute: Literal["none", "selective", "full"] = "none"
    zero: int | None = Field(None, ge=0, le=3, description="ZeRO stage (null: the software's default)")
    precision: TrainPrecision = TRAINING.precision
    software: SoftwareName = TRAINING.software

    @model_validator(mode="after")
    def _size(self) -> TrainEstimateRequest:
        gpus = self.tp * self.pp * self.dp * self.cp
        if gpus > MAX_GPUS:
            raise ValueError(f"tp*pp*dp*cp = {gpus:,} GPUs; allowed: 1 to {MAX_GPUS:,}")
        return self


class InferEstimateRequest(_Body):
    """One serving configuration (as `tenfold estimate infer`, with its defaults), optionally with its
    curve."""

    ASSUMED: ClassVar[tuple[str, ...]] = (
        "input_len", "output_len", "concurrency", "tp", "dp", "ep", "precision", "kv_precision", "engine",
    )  # fmt: skip

    model: ModelName = "llama3-70b"
    gpu: GpuName = "b200"
    input_len: int = Field(1024, ge=1, le=MAX_SEQ, description="prompt tokens per request")
    output_len: int = Field(1024, ge=1, le=MAX_SEQ, description="generated tokens per request")
    concurrency: int = Field(0, ge=0, le=1_000_000, description="requests in flight (0: as many as fit)")
    tp: int = Field(1, ge=1, le=256)
    dp: int = Field(1, ge=1, le=256)
    ep: int = Field(1, ge=1, le=256)
    precision: WeightPrecision = "bf16"
    kv_precision: KvPrecision = Field(
        "auto", description="KV-cache format; auto: what the engine picks for the checkpoint"
    )
    engine: EngineName = "trtllm"
    curve: bool = Field(True, description="also the throughput-vs-interactivity curve")


class SearchRequest(_TrainingBody):
    """A layout search (as `tenfold search train`); its grid size is checked before it runs."""

    ASSUMED: ClassVar[tuple[str, ...]] = (
        "seq_len", "global_batch", "precision", "software", "max_vp", "calibration",
    )  # fmt: skip

    model: ModelName = "llama3-70b"
    gpu: GpuName = "h100-sxm"
    num_gpus: int = Field(64, ge=1, le=MAX_GPUS, description="GPUs in the cluster")
    seq_len: int = Field(TRAINING.seq_len, ge=1, le=MAX_SEQ, description="tokens per sequence")
    global_batch: int = Field(
        TRAINING.global_batch, ge=1, le=MAX_BATCH, description="sequences per optimizer step"
    )
    precision: TrainPrecision = TRAINING.precision
    software: SoftwareName = TRAINING.software
    top: int = Field(3, ge=1, le=20, description="plans returned")
    max_vp: int = Field(TRAINING.max_vp, ge=1, le=16, description="largest virtual-pipeline depth tried")


class CompareRequest(_TrainingBody):
    """A comparison across GPU types (as `tenfold compare`): a training run at a fixed GPU count or a
    deadline, or a serving load with an interactivity target."""

    ASSUMED: ClassVar[tuple[str, ...]] = ("precision", "rent_basis", "grid")
    ASSUMED_TRAINING: ClassVar[tuple[str, ...]] = ("tokens", "seq_len", "global_batch", "calibration")
    ASSUMED_SERVING: ClassVar[tuple[str, ...]] = (
        "input_len", "output_len", "demand_tokens_per_s", "min_tokens_per_s_per_user", "max_ttft_s", "days",
    )  # fmt: skip

    kind: Literal["training", "serving"] = "training"
    model: ModelName = "llama3-70b"
    gpus: list[GpuName] = Field(
        default_factory=lambda: list(DEFAULT_GPUS), min_length=1, max_length=MAX_COMPARE_GPUS
    )
    precision: TrainPrecision | None = Field(
        None, description="one precision for all GPUs (null: best per GPU)"
    )
    # training
    tokens: float = Field(1e12, ge=1e6, le=1e15, description="training tokens")
    num_gpus: int | None = Field(1024, ge=8, le=MAX_GPUS, description="fixed GPU count (or give a deadline)")
    deadline_days: float | None = Field(None, ge=0.01, le=3650, description="fewest GPUs finishing in time")
    seq_len: int = Field(TRAINING.seq_len, ge=128, le=131_072, description="tokens per sequence")
    global_batch: int = Field(
        TRAINING.global_batch, ge=1, le=65_536, description="sequences per optimizer step"
    )
    # serving
    input_len: int = Field(1024, ge=1, le=131_072)
    output_len: int = Field(1024, ge=1, le=131_072)
    demand_tokens_per_s: float = Field(1e5, ge=1.0, le=1e9, description="aggregate output tok/s")
    min_tokens_per_s_per_user: float = Field(20.0, ge=0.1, le=10_000.0, description="interactivity target")
    max_ttft_s: float = Field(5.0, ge=0.01, le=600.0, description="time-to-first-token limit, s")
    days: float = Field(30.0, ge=0.01, le=3650.0, description="days of serving to cost")
    # money
    rent_basis: Literal["reserved", "ondemand"] = "reserved"
    grid: GridPreset = "us"

    def assumed(self) -> tuple[str, ...]:
        """The common fields, and those of the kind of comparison asked for."""
        kind = self.ASSUMED_TRAINING if self.kind == "training" else self.ASSUMED_SERVING
        mode = ("num_gpus",) if self.deadline_days is None else ("deadline_days",)
        return self.ASSUMED + kind + (mode if self.kind == "training" else ())

    @model_validator(mode="after")
    def _one_mode(self) -> CompareRequest:
        if len(set(self.gpus)) != len(self.gpus):
            raise ValueError(f"gpus: each GPU at most once, got {self.gpus}")
        if self.kind == "training" and (self.num_gpus is None) == (self.deadline_days is None):
            raise ValueError(
                "training: give exactly one of num_gpus (8 to 65,536) or deadline_days (0.01 to 3650)"
            )
        if self.kind == "serving" and self.calibration is not None:
            raise ValueError("calibration: a training calibration; it does not apply to a serving comparison")
        return self
