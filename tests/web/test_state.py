"""Each app holds its own state (limits, heavy slots, cached files), and a heavy request maps the
planner's errors to the answers the routes promise."""

import pytest

from tenfold.perf.errors import Infeasible
from tenfold.web import create_app
from tenfold.web.bounds import Limits, TimeLimit
from tenfold.web.responses import json_response
from tenfold.web.state import WebState, run_heavy


def test_apps_do_not_share_state():
    a, b = create_app(heavy_slots=1), create_app(time_limit_s=5.0)
    assert a.state.web is not b.state.web
    assert a.state.web.limits == Limits(heavy_slots=1)
    assert b.state.web.limits.time_limit_s == 5.0 and b.state.web.limits.heavy_slots == 2


def test_limits_name_a_bad_value():
    with pytest.raises(ValueError, match="heavy_slots must be >= 0, got -1"):
        Limits(heavy_slots=-1)


@pytest.mark.parametrize(
    ("error", "status"),
    [(ValueError("bad"), 422), (Infeasible("nothing fits"), 422), (TimeLimit("late"), 503)],
)
def test_run_heavy_maps_errors_and_frees_its_slot(error, status):
    state = WebState.of(Limits(heavy_slots=1))

    def work():
        raise error

    assert run_heavy(state, work).status_code == status
    assert run_heavy(state, lambda: json_response({"ok": True})).status_code == 200  # the slot is free again


def test_run_heavy_busy():
    state = WebState.of(Limits(heavy_slots=1))
    assert state.heavy.acquire(blocking=False)
    r = run_heavy(state, lambda: json_response({"ok": True}))
    assert r.status_code == 429 and b"busy: 1 searches already running" in r.body
