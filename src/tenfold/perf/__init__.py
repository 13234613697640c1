"""Planning half of tenfold: analytic training-performance model, parallelism search, validation.

Never imports torch (a test checks it). Public API:

* catalogs: `load_hardware`, `list_hardware`, `Hardware`; `load_model`, `list_models`, `ModelSpec`
* plans: `Layout`, `stack` (software presets), `get_precision`
* `estimate_training(...)` -> `TrainingEstimate`; `search_training(...)` -> `SearchResult`
* `load_calibration()`, `fit_calibration()`; `validate_training(...)` -> `ValidationReport`
"""

from tenfold.perf.calibration import Calibration, fit_calibration, load_calibration
from tenfold.perf.hardware import Hardware, list_hardware, load_hardware
from tenfold.perf.layout import Layout
from tenfold.perf.models import ModelSpec, list_models, load_model
from tenfold.perf.precision import PRECISIONS, get_precision
from tenfold.perf.stack import STACK_NAMES, Stack, stack
from tenfold.perf.training import Infeasible, TrainingEstimate, estimate_training

__all__ = [
    "PRECISIONS",
    "STACK_NAMES",
    "Calibration",
    "Hardware",
    "Infeasible",
    "Layout",
    "ModelSpec",
    "Stack",
    "TrainingEstimate",
    "estimate_training",
    "fit_calibration",
    "get_precision",
    "list_hardware",
    "list_models",
    "load_calibration",
    "load_hardware",
    "load_model",
    "stack",
]
