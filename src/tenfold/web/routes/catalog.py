"""GET /api/catalog: the shipped models and GPUs, the limits and the defaults, for the form's choices
(the form enforces the limits before it submits)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from tenfold.perf.defaults import MAX_COMPARE_GPUS, TRAINING
from tenfold.perf.specs.hardware import load_hardware
from tenfold.perf.specs.models import load_model
from tenfold.web.responses import json_response
from tenfold.web.schemas import GPU_NAMES, MODEL_NAMES

router = APIRouter()


@router.get("/api/catalog")
def catalog() -> JSONResponse:
    """The shipped models and GPUs with the figures the form shows, the comparison's limits and the
    training defaults."""
    gpus = []
    for name in GPU_NAMES:
        h = load_hardware(name)
        gpus.append(
            {
                "name": h.name,
                "display_name": h.display_name,
                "arch": h.arch,
                "hbm_GiB": h.hbm_GiB,
                "bf16_TFLOPs": h.peak_flops["bf16"] / 1e12,
                "fp8_TFLOPs": h.peak_flops.get("fp8", float("nan")) / 1e12,
                "fp4_TFLOPs": h.peak_flops.get("fp4", float("nan")) / 1e12,
                "scaleup_domain": h.scaleup_domain,
                "block_scaled_formats": list(h.block_scaled_formats),
                "ondemand_usd_h": h.ondemand_usd_h,
            }
        )
    models = []
    for name in MODEL_NAMES:
        m = load_model(name)
        models.append(
            {
                "name": m.name,
                "display_name": m.display_name or m.name,
                "layers": m.layers,
                "hidden": m.hidden,
                "is_moe": m.is_moe,
                "experts": m.experts,
            }
        )
    return json_response(
        {
            "models": models,
            "hardware": gpus,
            "limits": {"max_compare_gpus": MAX_COMPARE_GPUS},
            "defaults": {"seq_len": TRAINING.seq_len, "global_batch": TRAINING.global_batch},
        }
    )
