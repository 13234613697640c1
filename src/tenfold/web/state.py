"""What one app holds while it serves: its limits, the slots for heavy requests, and files it read once.

`create_app` builds one `WebState` and keeps it on `app.state.web` (no module globals), so two apps in
one process (the tests make several with different limits) never share slots or limits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import Request
from fastapi.responses import JSONResponse

from tenfold.perf.errors import Infeasible
from tenfold.web.bounds import Limits, TimeLimit
from tenfold.web.responses import bad_input, json_response


@dataclass(frozen=True, kw_only=True)
class WebState:
    """One app's serving state."""

    limits: Limits
    """The work bounds (time limit, heavy slots, grid sizes)."""
    heavy: threading.BoundedSemaphore
    """One slot per search or comparison allowed at once (`limits.heavy_slots`)."""
    files: dict[str, str] = field(default_factory=dict)
    """Static text read on first use (the Plotly bundle), by name."""

    @classmethod
    def of(cls, limits: Limits) -> WebState:
        """A fresh state for `limits`: all heavy slots free, nothing read yet."""
        return cls(limits=limits, heavy=threading.BoundedSemaphore(limits.heavy_slots))


def web_state(request: Request) -> WebState:
    """The state of the app serving `request` (set by `create_app`)."""
    return request.app.state.web


def run_heavy(state: WebState, work: Callable[[], JSONResponse]) -> JSONResponse:
    """Run a search or comparison in a free heavy slot: 429 when none is free, 503 past the time limit,
    422 when the planner rejects the input (a ValueError, or an Infeasible plan)."""
    if not state.heavy.acquire(blocking=False):
        slots = state.limits.heavy_slots
        return json_response({"message": f"busy: {slots} searches already running; retry shortly"}, 429)
    try:
        return work()
    except TimeLimit as exc:
        return json_response({"message": f"time limit: {exc}; ask for fewer GPUs or GPU types"}, 503)
    except (ValueError, Infeasible) as exc:
        return bad_input(str(exc))
    finally:
        state.heavy.release()
