"""Cost half of tenfold's planning: owning or renting a GPU-hour, energy and carbon, the side-by-side
comparison behind `tenfold compare`, NVIDIA's claims decomposed, and the fleet planner.

Never imports torch (a test checks it). Public API:

* `OwnInputs`, `own_cost`, `own_inputs`, `rent_prices`, `annuity_factor`: $/GPU-hour rented or owned
* `footprint`: facility MWh and tCO2 of a job; `grid_intensity` presets
* `own_tornado`, `rent_tornado`: sensitivity of a job's cost to its inputs
* `TrainingWorkload`, `ServingWorkload`, `CostSettings`; `compare_training`, `compare_serving` ->
  `Comparison`; `compare_default()` -> `ComparisonSet` (what `tenfold compare` runs with no arguments)
* `check_claims()` -> `ClaimsReport`; `speedup_checks()` against Megatron-Bridge
* `FleetSpec`, `load_fleet`, `plan_fleet` -> `FleetPlan`
"""
