"""POST /api/search/train: the fastest training layouts, after a grid-size check, in a heavy slot."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from tenfold.perf.training.search import search_training
from tenfold.report.charts import search_charts
from tenfold.report.ranges import training_intervals
from tenfold.web.bounds import plan_count, time_limit
from tenfold.web.responses import bad_input, json_response
from tenfold.web.schemas import SearchRequest
from tenfold.web.state import run_heavy, web_state

router = APIRouter()


@router.post("/api/search/train")
def search_train(req: SearchRequest, request: Request) -> JSONResponse:
    """The fastest layouts for a model, a GPU count and a global batch; each with the 80 % ranges of its
    tokens/s/GPU and step time (`*_interval`, null without a measured uncertainty)."""
    state = web_state(request)
    most = state.limits.max_search_plans
    n = plan_count(req.model, req.num_gpus, req.seq_len, req.max_vp, req.software)
    if n > most:
        return bad_input(
            f"num_gpus: {req.num_gpus:,} GPUs give {n:,} layouts to search; allowed: at most "
            f"{most:,} (fewer GPUs, or a smaller max_vp)"
        )

    def work() -> JSONResponse:
        r = search_training(
            req.model,
            req.gpu,
            req.num_gpus,
            seq_len=req.seq_len,
            global_batch=req.global_batch,
            precision=req.precision,
            software=req.software,
            top_k=req.top,
            max_vp=req.max_vp,
            calibration=req.user_calibration(),
            progress=time_limit(state.limits.time_limit_s),
        )
        charts = [c.to_dict() for c in search_charts(r)]
        result = r.to_dict()
        result["top"] = [d | training_intervals(e) for d, e in zip(result["top"], r.top, strict=True)]
        return json_response({"result": result, "assumptions": req.assumptions(), "charts": charts})

    return run_heavy(state, work)
