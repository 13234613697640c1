"""POST /api/compare: GPU types side by side for one training run or serving load, in a heavy slot.

A training comparison is bounded first (`compare_plan_bound` against `Limits.max_compare_plans`), since
a deadline search probes many GPU counts per GPU type and precision.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from tenfold.cost.compare import Progress, compare_training
from tenfold.cost.compare_serving import compare_serving
from tenfold.cost.results import Comparison
from tenfold.cost.workloads import CostSettings, ServingWorkload, TrainingWorkload
from tenfold.perf.defaults import MAX_DEADLINE_GPUS
from tenfold.perf.errors import Infeasible
from tenfold.report.compare import comparison_charts, comparison_table
from tenfold.web.bounds import compare_plan_bound, time_limit
from tenfold.web.responses import bad_input, json_response
from tenfold.web.schemas import CompareRequest
from tenfold.web.state import run_heavy, web_state

router = APIRouter()


def run_comparison(req: CompareRequest, progress: Progress) -> Comparison:
    """The comparison `req` asks for, training or serving, with the library's own calls."""
    settings = CostSettings(rent_basis=req.rent_basis, grid=req.grid)
    precisions = (req.precision,) if req.precision else None
    common = dict(precisions=precisions, settings=settings, progress=progress)
    if req.kind == "training":
        w = TrainingWorkload(
            model=req.model, tokens=req.tokens, seq_len=req.seq_len, global_batch=req.global_batch
        )
        return compare_training(
            w,
            list(req.gpus),
            num_gpus=req.num_gpus if req.deadline_days is None else None,
            deadline_days=req.deadline_days,
            max_gpus=MAX_DEADLINE_GPUS,
            calibration=req.user_calibration(),
            **common,
        )
    w = ServingWorkload(
        model=req.model,
        input_len=req.input_len,
        output_len=req.output_len,
        output_tokens_per_s=req.demand_tokens_per_s,
        min_tokens_per_s_per_user=req.min_tokens_per_s_per_user,
        max_ttft_s=req.max_ttft_s,
        days=req.days,
    )
    return compare_serving(w, list(req.gpus), **common)


def comparison_answer(c: Comparison, req: CompareRequest) -> JSONResponse:
    """The numbers, the assumptions, the side-by-side table the report prints, its notes, and the charts."""
    t = comparison_table(c)
    return json_response(
        {
            "result": c.to_dict(),
            "assumptions": req.assumptions(),
            "table": {"caption": t.caption, "columns": list(t.columns), "rows": [list(r) for r in t.rows]},
            "notes": list(t.notes),
            "charts": [ch.to_dict() for ch in comparison_charts(c)],
        }
    )


@router.post("/api/compare")
def compare(req: CompareRequest, request: Request) -> JSONResponse:
    """GPUs side by side for one workload: days, GPU-hours, rent and own cost, MWh, tCO2, ratios."""
    state = web_state(request)
    if req.kind == "training":
        try:
            bound = compare_plan_bound(req)
        except (ValueError, Infeasible) as exc:
            return bad_input(str(exc))
        most = state.limits.max_compare_plans
        if bound > most:
            what = "a deadline" if req.deadline_days is not None else f"{req.num_gpus:,} GPUs"
            return bad_input(
                f"gpus: {len(req.gpus)} GPU types at {what} is too large a comparison to answer here "
                f"({bound:,} layouts to search; at most {most:,}): compare fewer GPU types, choose one "
                "precision, or give a fixed GPU count"
            )

    def work() -> JSONResponse:
        return comparison_answer(run_comparison(req, time_limit(state.limits.time_limit_s)), req)

    return run_heavy(state, work)
