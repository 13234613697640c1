"""The JSON answers every route shares: numbers cleaned for JSON (NaN and inf become null), and the
422 shape FastAPI uses for bad input, with a `message` line the page shows as is."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from tenfold.report.format import json_clean


def json_response(obj: dict[str, Any], status: int = 200) -> JSONResponse:
    """`obj` as JSON, NaN and inf written as null (`report.format.json_clean`)."""
    return JSONResponse(json_clean(obj), status_code=status)


def bad_input(message: str) -> JSONResponse:
    """A 422 in FastAPI's own shape, for input the pydantic bounds let through but the model rejects."""
    return json_response(
        {"detail": [{"loc": ["body"], "msg": message, "type": "value_error"}], "message": message}, 422
    )
