"""Property-based fuzzing of the API against its own OpenAPI schema (schemathesis): whatever a client
sends within or around the schema, the server never answers 5xx. Small example counts keep the default
suite quick; `pytest -m slow tests/web/test_fuzz.py` runs the larger pass (150 examples per operation;
comparisons 60 examples under a 2,000,000-layout bound, about 2 s of search at most each)."""

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from tenfold.web import create_app

schema = schemathesis.openapi.from_asgi("/openapi.json", create_app())
quick = schema.exclude(path="/api/compare")
# the default suite fuzzes comparisons under a smaller work bound (beyond it: a quick 422), so that each
# example takes well under a second; the slow pass below uses the served bounds
compare = schemathesis.openapi.from_asgi("/openapi.json", create_app(max_compare_plans=200_000)).include(
    path="/api/compare"
)
FUZZ = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


@quick.parametrize()
@settings(max_examples=12, **FUZZ)
def test_no_server_errors(case):
    case.call_and_validate(checks=[not_a_server_error])


@compare.parametrize()
@settings(max_examples=10, **FUZZ)
def test_compare_no_server_errors(case):
    case.call_and_validate(checks=[not_a_server_error])


@pytest.mark.slow
@quick.parametrize()
@settings(max_examples=150, **FUZZ)
def test_no_server_errors_long(case):
    case.call_and_validate(checks=[not_a_server_error])


wider = schemathesis.openapi.from_asgi("/openapi.json", create_app(max_compare_plans=2_000_000)).include(
    path="/api/compare"
)


@pytest.mark.slow
@wider.parametrize()
@settings(max_examples=60, **FUZZ)
def test_compare_no_server_errors_long(case):
    case.call_and_validate(checks=[not_a_server_error])
