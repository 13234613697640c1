"""The page and the Plotly bundle it draws with (served here, so the page loads nothing from a CDN)."""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from tenfold.report.page import plotly_js
from tenfold.web.state import web_state

router = APIRouter()


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def index() -> HTMLResponse:
    """The comparison form (static/index.html)."""
    return HTMLResponse(files("tenfold.web").joinpath("static/index.html").read_text(encoding="utf-8"))


@router.get("/static/plotly.js", include_in_schema=False)
def plotly(request: Request) -> Response:
    """The Plotly bundle, read once per app and cached by the browser for a day."""
    cache = web_state(request).files
    if "js" not in cache:
        cache["js"] = plotly_js()
    return Response(
        cache["js"], media_type="application/javascript", headers={"Cache-Control": "max-age=86400"}
    )
