"""The planning models' one error type for plans that cannot run.

Convention, one per kind of answer:
* an estimate of one plan returns `feasible=False` with the reason, so a table can show why a row has no
  number (`TrainingEstimate.raise_if_infeasible()` turns it into this error where a plan is required);
* a search returns its result with no best plan and the count of plans each rule rejected, which the
  command prints before exiting 1 (the counts say more than one message could);
* a caller that needs a plan to go on (a curve, a claim's scenario, a speedup pair) raises `Infeasible`.
Bad input (an unknown GPU, TP that does not divide the heads) is a `ValueError`. `Infeasible` is
deliberately not a `ValueError`, so a handler can tell "the inputs are wrong" from "the inputs are fine
but nothing fits" without ordering its `except` clauses.
"""

from __future__ import annotations


class Infeasible(Exception):
    """A plan that cannot run; the message prints the numbers (memory needed vs available, divisibility)."""
