"""The web UI: `create_app()` returns the FastAPI app that `tenfold serve` runs with uvicorn."""

from tenfold.web.app import create_app

__all__ = ["create_app"]
