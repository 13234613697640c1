"""The planning models' one error type for plans that cannot run.

Convention: an estimate of one plan returns `feasible=False` with the reason (so a table can show why a
row has no number); a search or a curve that finds nothing feasible raises `Infeasible`. Bad input (an
unknown GPU, TP that does not divide the heads) is a `ValueError`. `Infeasible` is deliberately not a
`ValueError`, so a handler can tell "the inputs are wrong" from "the inputs are fine but nothing fits"
without ordering its `except` clauses.
"""

from __future__ import annotations


class Infeasible(Exception):
    """A plan that cannot run; the message prints the numbers (memory needed vs available, divisibility)."""
