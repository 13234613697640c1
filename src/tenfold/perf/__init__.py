"""Planning half of tenfold: analytic training-performance model, parallelism search, validation.

Never imports torch (a test checks it). Public API:

* catalogs: `load_hardware`, `list_hardware`, `Hardware`; `load_model`, `list_models`, `ModelSpec`
* plans: `Layout`, `stack` (software presets), `get_precision`
* `estimate_training(...)` -> `TrainingEstimate`; `search_training(...)` -> `SearchResult`
* `load_calibration()`, `fit_calibration()`; `validate_training(...)` -> `ValidationReport`
* serving: `estimate_inference(...)` -> `InferenceEstimate`, `inference_curve(...)` -> `InferenceCurve`,
  `Deployment` (TP / attention DP / EP), `engine` presets, `kv_bytes_per_token`;
  `validate_inference(...)` -> `ValidationReport`
"""

from tenfold.perf.calibration import Calibration, load_calibration
from tenfold.perf.errors import Infeasible
from tenfold.perf.serving.curve import inference_curve
from tenfold.perf.serving.estimate import estimate_inference
from tenfold.perf.serving.kvcache import kv_bytes_per_sequence, kv_bytes_per_token
from tenfold.perf.serving.presets import ENGINE_NAMES, Engine, engine
from tenfold.perf.serving.results import Deployment, InferenceCurve, InferenceEstimate
from tenfold.perf.specs.hardware import Hardware, list_hardware, load_hardware
from tenfold.perf.specs.models import ModelSpec, list_models, load_model
from tenfold.perf.specs.precision import PRECISIONS, get_precision
from tenfold.perf.training.estimate import TrainingEstimate, estimate_training
from tenfold.perf.training.layout import Layout
from tenfold.perf.training.stack import STACK_NAMES, Stack, stack
from tenfold.perf.validation.fit import fit_calibration
from tenfold.perf.validation.serving import validate_inference

__all__ = [
    "ENGINE_NAMES",
    "PRECISIONS",
    "STACK_NAMES",
    "Calibration",
    "Deployment",
    "Engine",
    "Hardware",
    "Infeasible",
    "InferenceCurve",
    "InferenceEstimate",
    "Layout",
    "ModelSpec",
    "Stack",
    "TrainingEstimate",
    "engine",
    "estimate_inference",
    "estimate_training",
    "fit_calibration",
    "get_precision",
    "inference_curve",
    "kv_bytes_per_sequence",
    "kv_bytes_per_token",
    "list_hardware",
    "list_models",
    "load_calibration",
    "load_hardware",
    "load_model",
    "stack",
    "validate_inference",
]
