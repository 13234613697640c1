"""The web app: a page with a comparison form, and a JSON API over the same Python calls as the CLI.

Endpoints (OpenAPI at /openapi.json): GET /api/catalog; POST /api/estimate/train, /api/estimate/infer,
/api/search/train, /api/compare. Each answer carries the numbers (`result`) and the charts (`charts`: the
`tenfold.report` Chart objects the HTML report draws, as Plotly JSON), so the page and the report show the
same thing. Work is bounded: request bounds in schemas.py, a grid-size check before a search, a time
limit per request (checked between search chunks), and at most `heavy_slots` searches or comparisons at
once (beyond that: 429). Bad input: 422 with the field and its allowed range. Never imports torch.
"""

from __future__ import annotations

import math
import threading
import time
from importlib.resources import files
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response

from tenfold.cost.compare import compare_training, gpu_ladder
from tenfold.cost.compare_serving import compare_serving
from tenfold.cost.workloads import CostSettings, ServingWorkload, TrainingWorkload, precisions_for
from tenfold.perf import Deployment, estimate_inference, inference_curve
from tenfold.perf.errors import Infeasible
from tenfold.perf.specs.hardware import load_hardware
from tenfold.perf.specs.models import load_model
from tenfold.perf.training.estimate import estimate_training
from tenfold.perf.training.layout import Layout
from tenfold.perf.training.search import MICRO_BATCHES, RECOMPUTES, ZERO_STAGES, search_training
from tenfold.perf.training.stack import stack
from tenfold.report.charts import (
    inference_breakdown_chart,
    inference_curve_chart,
    inference_memory_chart,
    search_charts,
    training_breakdown_chart,
    training_memory_chart,
)
from tenfold.report.compare import comparison_charts, comparison_table
from tenfold.report.page import clean, plotly_js
from tenfold.web.schemas import (
    GPU_NAMES,
    MAX_COMPARE_PLANS,
    MAX_DEADLINE_GPUS,
    MAX_SEARCH_PLANS,
    MODEL_NAMES,
    CompareRequest,
    InferEstimateRequest,
    SearchRequest,
    TrainEstimateRequest,
)

TIME_LIMIT_S = 30.0


class TimeLimit(Exception):
    """A request ran past its time limit (raised from a progress callback, between chunks of work)."""


def plan_count(model: str, num_gpus: int, seq_len: int, max_vp: int, software: str) -> int:
    """How many layouts `search_training` would enumerate (the same grid as search.enumerate_plans),
    counted without building it."""
    m = load_model(model)
    if not stack(software).interleaving:
        max_vp = 1
    divs = [d for d in range(1, num_gpus + 1) if num_gpus % d == 0]
    eps = len([e for e in divs if m.experts % e == 0]) if m.is_moe else 1
    per = eps * len(MICRO_BATCHES) * len(RECOMPUTES) * len(ZERO_STAGES)
    total = 0
    for tp in divs:
        if tp > m.heads:
            continue
        for pp in divs:
            if num_gpus % (tp * pp) or pp > m.layers:
                continue
            for cp in divs:
                if num_gpus % (tp * pp * cp) or cp > seq_len:
                    continue
                total += (max_vp if pp > 1 else 1) * per
    return total


def compare_plan_bound(req: CompareRequest) -> int:
    """An upper bound on the layouts a training comparison searches: per GPU type and precision, one
    search at the fixed count, or (deadline) one per bisection probe of the GPU-count ladder, each
    bounded by the largest grid on the ladder."""
    allowed = (req.precision,) if req.precision else None
    if req.deadline_days is None:
        probes, counts = 1, [req.num_gpus or 1]
    else:
        counts = gpu_ladder(MAX_DEADLINE_GPUS)
        probes = math.ceil(math.log2(len(counts))) + 2
    grid = max(plan_count(req.model, n, req.seq_len, 8, "megatron-core") for n in counts)
    n_prec = sum(len(precisions_for(load_hardware(g), allowed)) for g in req.gpus)
    return n_prec * probes * grid


def _deadline(limit_s: float):
    """A progress callback that raises TimeLimit once `limit_s` seconds have passed."""
    t_end = time.perf_counter() + limit_s

    def check(done: int, total: int) -> None:
        if time.perf_counter() > t_end:
            raise TimeLimit(f"stopped after {limit_s:g} s at {done} of {total} steps")

    return check


def _json(obj: dict[str, Any], status: int = 200) -> JSONResponse:
    return JSONResponse(clean(obj), status_code=status)


def _bad(message: str) -> JSONResponse:
    """A 422 in FastAPI's own shape, for input the pydantic bounds let through but the model rejects."""
    return _json(
        {"detail": [{"loc": ["body"], "msg": message, "type": "value_error"}], "message": message}, 422
    )


def _field_range(model: type | None, loc: tuple) -> str:
    """'allowed: 1 to 1048576' for a bounded body field, from the route's request model."""
    if model is None or len(loc) < 2 or loc[0] != "body":
        return ""
    field = model.model_fields.get(str(loc[1]))
    if field is None:
        return ""
    lo = hi = None
    for m in field.metadata:
        lo = getattr(m, "ge", lo)
        hi = getattr(m, "le", hi)
    if lo is None and hi is None:
        return ""

    def num(x: float | None, missing: str) -> str:
        return missing if x is None else (f"{x:g}" if isinstance(x, float) else str(x))

    return f"allowed: {num(lo, '-inf')} to {num(hi, 'inf')}"


BODY_MODELS = {
    "/api/estimate/train": TrainEstimateRequest,
    "/api/estimate/infer": InferEstimateRequest,
    "/api/search/train": SearchRequest,
    "/api/compare": CompareRequest,
}


def create_app(
    *,
    time_limit_s: float = TIME_LIMIT_S,
    heavy_slots: int = 2,
    max_search_plans: int = MAX_SEARCH_PLANS,
    max_compare_plans: int = MAX_COMPARE_PLANS,
) -> FastAPI:
    """The FastAPI application (uvicorn serves it; tests drive it with TestClient). The keyword
    arguments tighten or loosen the work bounds (schemas.py has the defaults)."""
    app = FastAPI(
        title="tenfold",
        version="0.1.0",
        description="What Blackwell-class GPUs are worth for a training run or a serving load.",
        docs_url=None,  # the Swagger page loads scripts from a CDN; the schema stays at /openapi.json
        redoc_url=None,
    )
    heavy = threading.BoundedSemaphore(heavy_slots)
    cache: dict[str, str] = {}

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        model = BODY_MODELS.get(request.url.path)
        details, lines = [], []
        for err in exc.errors():
            loc = tuple(err.get("loc", ()))
            name = ".".join(str(x) for x in loc[1:]) or "body"
            rng = _field_range(model, loc)
            msg = str(err.get("msg", "invalid"))
            details.append({"loc": list(loc), "msg": msg, "type": err.get("type", ""), "allowed": rng})
            lines.append(f"{name}: {msg}" + (f" ({rng})" if rng else ""))
        return _json({"detail": details, "message": "; ".join(lines)}, 422)

    def run_heavy(fn):
        if not heavy.acquire(blocking=False):
            return _json({"message": f"busy: {heavy_slots} searches already running; retry shortly"}, 429)
        try:
            return fn()
        except TimeLimit as exc:
            return _json({"message": f"time limit: {exc}; ask for fewer GPUs or GPU types"}, 503)
        except ValueError as exc:
            return _bad(str(exc))
        finally:
            heavy.release()

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index() -> HTMLResponse:
        return HTMLResponse(files("tenfold.web").joinpath("static/index.html").read_text(encoding="utf-8"))

    @app.get("/static/plotly.js", include_in_schema=False)
    def plotly() -> Response:
        if "js" not in cache:
            cache["js"] = plotly_js()
        return Response(
            cache["js"], media_type="application/javascript", headers={"Cache-Control": "max-age=86400"}
        )

    @app.get("/api/catalog")
    def catalog() -> JSONResponse:
        """The shipped models and GPUs, with the figures the form shows."""
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
        return _json({"models": models, "hardware": gpus})

    @app.post("/api/estimate/train")
    def estimate_train(req: TrainEstimateRequest) -> JSONResponse:
        """One training plan: step time with breakdown, tokens/s/GPU, MFU, memory per GPU."""
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
            )
        except ValueError as exc:
            return _bad(str(exc))
        charts = []
        if e.breakdown is not None:
            charts = [training_breakdown_chart([e]), training_memory_chart([e])]
        return _json({"result": e.to_dict(), "charts": [c.to_dict() for c in charts]})

    @app.post("/api/estimate/infer")
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
            return _json({"result": {"feasible": False, "reason": str(exc)}, "charts": []})
        except ValueError as exc:
            return _bad(str(exc))
        charts = []
        if e.feasible:
            charts = [inference_breakdown_chart([e]), inference_memory_chart([e])]
        if curve is not None:
            charts.append(inference_curve_chart([curve]))
        out = {"result": e.to_dict(), "charts": [c.to_dict() for c in charts]}
        if curve is not None:
            out["curve"] = curve.to_dict()
        return _json(out)

    @app.post("/api/search/train")
    def search_train(req: SearchRequest) -> JSONResponse:
        """The fastest layouts for a model, a GPU count and a global batch."""
        n = plan_count(req.model, req.num_gpus, req.seq_len, req.max_vp, req.software)
        if n > max_search_plans:
            return _bad(
                f"num_gpus: {req.num_gpus:,} GPUs give {n:,} layouts to search; allowed: at most "
                f"{max_search_plans:,} (fewer GPUs, or a smaller max_vp)"
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
                progress=_deadline(time_limit_s),
            )
            return _json({"result": r.to_dict(), "charts": [c.to_dict() for c in search_charts(r)]})

        return run_heavy(work)

    @app.post("/api/compare")
    def compare(req: CompareRequest) -> JSONResponse:
        """GPUs side by side for one workload: days, GPU-hours, rent and own cost, MWh, tCO2, ratios."""

        if req.kind == "training":
            try:
                bound = compare_plan_bound(req)
            except ValueError as exc:
                return _bad(str(exc))
            if bound > max_compare_plans:
                what = "a deadline" if req.deadline_days is not None else f"{req.num_gpus:,} GPUs"
                return _bad(
                    f"gpus: {len(req.gpus)} GPU types at {what} may search {bound:,} layouts; allowed: at "
                    f"most {max_compare_plans:,} (fewer GPU types, one precision, fewer GPUs, a fixed count)"
                )

        def work() -> JSONResponse:
            settings = CostSettings(rent_basis=req.rent_basis, grid=req.grid)
            precisions = (req.precision,) if req.precision else None
            common = dict(precisions=precisions, settings=settings, progress=_deadline(time_limit_s))
            if req.kind == "training":
                w = TrainingWorkload(
                    model=req.model, tokens=req.tokens, seq_len=req.seq_len, global_batch=req.global_batch
                )
                c = compare_training(
                    w,
                    list(req.gpus),
                    num_gpus=req.num_gpus if req.deadline_days is None else None,
                    deadline_days=req.deadline_days,
                    max_gpus=MAX_DEADLINE_GPUS,
                    **common,
                )
            else:
                w = ServingWorkload(
                    model=req.model,
                    input_len=req.input_len,
                    output_len=req.output_len,
                    output_tokens_per_s=req.demand_tokens_per_s,
                    min_tokens_per_s_per_user=req.min_tokens_per_s_per_user,
                    max_ttft_s=req.max_ttft_s,
                    days=req.days,
                )
                c = compare_serving(w, list(req.gpus), **common)
            t = comparison_table(c)
            return _json(
                {
                    "result": c.to_dict(),
                    "table": {
                        "caption": t.caption,
                        "columns": list(t.columns),
                        "rows": [list(r) for r in t.rows],
                    },
                    "notes": list(t.notes),
                    "charts": [ch.to_dict() for ch in comparison_charts(c)],
                }
            )

        return run_heavy(work)

    return app
