"""The web app: a page with a comparison form, and a JSON API over the same Python calls as the CLI.

Endpoints (OpenAPI at /openapi.json), one router module each under routes/: GET /api/catalog; POST
/api/estimate/train, /api/estimate/infer, /api/search/train, /api/compare. Each answer carries the numbers
(`result`) and the charts (`charts`: the `tenfold.report` Chart objects the HTML report draws, as Plotly
JSON), so the page and the report show the same thing. Work is bounded (bounds.py): request bounds in
schemas.py, a grid-size check before a search, a time limit per request (checked between search chunks),
at most `heavy_slots` searches or comparisons at once (beyond that: 429), and a request body of at
most `max_body_bytes` (beyond that: 413, before the body is read). Bad input: 422 with the field
and its allowed range. Never imports torch.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from tenfold.perf.defaults import MAX_COMPARE_PLANS, MAX_SEARCH_PLANS
from tenfold.web.body import BodyLimit
from tenfold.web.bounds import MAX_BODY_BYTES, TIME_LIMIT_S, Limits
from tenfold.web.responses import json_response
from tenfold.web.routes import catalog, compare, estimate, page, search
from tenfold.web.schemas import (
    CompareRequest,
    InferEstimateRequest,
    SearchRequest,
    TrainEstimateRequest,
)
from tenfold.web.state import WebState

BODY_MODELS: dict[str, type[BaseModel]] = {
    "/api/estimate/train": TrainEstimateRequest,
    "/api/estimate/infer": InferEstimateRequest,
    "/api/search/train": SearchRequest,
    "/api/compare": CompareRequest,
}
"""The request body of each POST path, so a 422 can name a bad field's allowed range."""


def field_range(model: type[BaseModel] | None, loc: tuple) -> str:
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


async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 for a body that fails the schema, with each field's allowed range and one
    `message` line naming every bad field."""
    model = BODY_MODELS.get(request.url.path)
    details, lines = [], []
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        name = ".".join(str(x) for x in loc[1:]) or "body"
        rng = field_range(model, loc)
        msg = str(err.get("msg", "invalid"))
        details.append({"loc": list(loc), "msg": msg, "type": err.get("type", ""), "allowed": rng})
        lines.append(f"{name}: {msg}" + (f" ({rng})" if rng else ""))
    return json_response({"detail": details, "message": "; ".join(lines)}, 422)


def create_app(
    *,
    time_limit_s: float = TIME_LIMIT_S,
    heavy_slots: int = 2,
    max_search_plans: int = MAX_SEARCH_PLANS,
    max_compare_plans: int = MAX_COMPARE_PLANS,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> FastAPI:
    """The FastAPI application (uvicorn serves it; tests drive it with TestClient). The keyword
    arguments tighten or loosen the work bounds (schemas.py has the defaults)."""
    limits = Limits(
        time_limit_s=time_limit_s,
        heavy_slots=heavy_slots,
        max_search_plans=max_search_plans,
        max_compare_plans=max_compare_plans,
        max_body_bytes=max_body_bytes,
    )
    app = FastAPI(
        title="tenfold",
        version="0.1.0",
        description="What Blackwell-class GPUs are worth for a training run or a serving load.",
        docs_url=None,  # the Swagger page loads scripts from a CDN; the schema stays at /openapi.json
        redoc_url=None,
    )
    app.state.web = WebState.of(limits)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)
    for module in (page, catalog, estimate, search, compare):
        app.include_router(module.router)
    return app
