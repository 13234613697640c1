"""POST /api/estimate/train and /api/estimate/infer: one plan each, with its charts.

A plan that cannot run is an answer (200, `feasible` false, the reason), not an error: the estimates
return it so, and an `Infeasible` raised on the way is answered the same. Input the model rejects
(a ValueError) is a 422. Every answer states its `assumptions` (schemas.py: the fields that change the
answer, each with whether the request left it to the default).
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from tenfold.perf import Deployment, estimate_inference, inference_curve
from tenfold.perf.errors import Infeasible
from tenfold.perf.training.estimate import estimate_training
from tenfold.perf.training.layout import Layout
from tenfold.report.charts import (
    inference_breakdown_chart,
    inference_curve_chart,
    inference_memory_chart,
    training_breakdown_chart,
    training_memory_chart,
)
from tenfold.report.ranges import training_intervals
from tenfold.web.responses import bad_input, json_response
from tenfold.web.schemas import InferEstimateRequest, TrainEstimateRequest

router = APIRouter()


def infeasible(exc: Infeasible, req: TrainEstimateRequest | InferEstimateRequest) -> JSONResponse:
    """The answer for a plan that cannot run: 200, feasible false, the reason, no charts."""
    return json_response(
        {
            "result": {"feasible": False, "reason": str(exc)},
            "assumptions": req.assumptions(),
            "charts": [],
        }
    )


@router.post("/api/estimate/train")
def estimate_train(req: TrainEstimateRequest) -> JSONResponse:
    """One training plan: step time with breakdown, tokens/s/GPU, MFU, memory per GPU, and the 80 % ranges
    of tokens/s/GPU and step time (`*_interval`, null when the calibration has no uncertainty)."""
    try:
        lay = Layout(
            tp=req.tp,
            pp=req.pp,
            dp=req.dp,
            cp=req.cp,
            ep=req.ep,
            vp=req.vp,
            micro_batch=req.micro_batch,
            recompute=req.recompute,
            zero=req.zero,
        )
        e = estimate_training(
            req.model,
            req.gpu,
            lay,
            seq_len=req.seq_len,
            global_batch=req.global_batch,
            precision=req.precision,
            software=req.software,
            calibration=req.user_calibration(),
        )
    except Infeasible as exc:
        return infeasible(exc, req)
    except ValueError as exc:
        return bad_input(str(exc))
    charts = []
    if e.breakdown is not None:
        charts = [training_breakdown_chart([e]), training_memory_chart([e])]
    return json_response(
        {
            "result": e.to_dict() | training_intervals(e),
            "assumptions": req.assumptions(),
            "charts": [c.to_dict() for c in charts],
        }
    )


@router.post("/api/estimate/infer")
def estimate_infer(req: InferEstimateRequest) -> JSONResponse:
    """One serving configuration, and (curve=true) its throughput-vs-interactivity curve."""
    kw = dict(
        input_len=req.input_len,
        output_len=req.output_len,
        precision=req.precision,
        kv_precision=req.kv_precision,
        engine=req.engine,
    )
    try:
        dep = Deployment(tp=req.tp, dp=req.dp, ep=req.ep)
        e = estimate_inference(req.model, req.gpu, dep, concurrency=req.concurrency or None, **kw)
        curve = inference_curve(req.model, req.gpu, dep, **kw) if req.curve and e.feasible else None
    except Infeasible as exc:
        return infeasible(exc, req)
    except ValueError as exc:
        return bad_input(str(exc))
    charts = []
    if e.feasible:
        charts = [inference_breakdown_chart([e]), inference_memory_chart([e])]
    if curve is not None:
        charts.append(inference_curve_chart([curve]))
    out = {"result": e.to_dict(), "assumptions": req.assumptions(), "charts": [c.to_dict() for c in charts]}
    if curve is not None:
        out["curve"] = curve.to_dict()
    return json_response(out)
