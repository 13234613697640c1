"""Cost half of tenfold's planning: owning or renting a GPU-hour, energy and carbon, the side-by-side
comparison behind `tenfold compare`, NVIDIA's claims decomposed, and the fleet planner.

Never imports torch (a test checks it). Public API:

* `OwnInputs`, `own_cost`, `own_inputs`, `rent_prices`, `annuity_factor`: $/GPU-hour rented or owned
* `footprint`: facility MWh and tCO2 of a job; `grid_intensity` presets
* `own_tornado`, `rent_tornado`: sensitivity of a job's cost to its inputs
* `TrainingWorkload`, `ServingWorkload`, `CostSettings`; `compare_training`, `compare_serving` ->
  `Comparison`; `compare_default()` -> `ComparisonSet` (what `tenfold compare` runs with no arguments)
* `check_claims()` -> `ClaimsReport`; `article_claims()` -> `ArticleClaims` (the article's estimate checked);
  `speedup_checks()` against Megatron-Bridge
* `FleetSpec`, `load_fleet`, `plan_fleet` -> `FleetPlan`
"""

from tenfold.cost.claims.article import ArticleClaims, article_claims
from tenfold.cost.claims.nvidia import ClaimsReport, check_claims
from tenfold.cost.claims.speedups import speedup_checks
from tenfold.cost.compare import compare_default, compare_training
from tenfold.cost.compare_serving import compare_serving
from tenfold.cost.defaults import grid_intensity, load_cost_defaults
from tenfold.cost.energy import Footprint, footprint
from tenfold.cost.fleet import FleetPlan, FleetSpec, load_fleet, plan_fleet
from tenfold.cost.results import Comparison, ComparisonSet
from tenfold.cost.tco import OwnCost, OwnInputs, annuity_factor, own_cost, own_inputs, rent_prices
from tenfold.cost.tornado import Tornado, own_tornado, rent_tornado
from tenfold.cost.workloads import CostSettings, ServingWorkload, TrainingWorkload

__all__ = [
    "ArticleClaims",
    "ClaimsReport",
    "Comparison",
    "ComparisonSet",
    "CostSettings",
    "FleetPlan",
    "FleetSpec",
    "Footprint",
    "OwnCost",
    "OwnInputs",
    "ServingWorkload",
    "Tornado",
    "TrainingWorkload",
    "annuity_factor",
    "article_claims",
    "check_claims",
    "compare_default",
    "compare_serving",
    "compare_training",
    "footprint",
    "grid_intensity",
    "load_cost_defaults",
    "load_fleet",
    "own_cost",
    "own_inputs",
    "own_tornado",
    "plan_fleet",
    "rent_prices",
    "rent_tornado",
    "speedup_checks",
]
