"""Low-precision training engine: named recipes, a quantized linear layer with its three GEMMs written
out, `convert()`, backend selection and delayed-scaling state that checkpoints and reduces across ranks.

    >>> import torch
    >>> from torch import nn
    >>> from tenfold.engine import convert, update_scaling
    >>> model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64))
    >>> report = convert(model, "nvfp4")
    >>> len(report.converted)
    2
    >>> loss = model(torch.randn(32, 64)).square().mean()
    >>> loss.backward()
    >>> update_scaling(model)   # once per optimizer step (delayed-scaling recipes need it)
    0
"""

from tenfold.engine.autoprecision.policy import PrecisionPolicy, auto_policy
from tenfold.engine.autoprecision.sensitivity import SensitivityRow, SensitivityTable, sensitivity
from tenfold.engine.backend import GEMM_BACKENDS, BackendChoice, select_backend
from tenfold.engine.convert import ConversionPolicy, ConversionReport, LayerDecision, convert
from tenfold.engine.experts import ExpertGemm, QuantExperts
from tenfold.engine.gemm import GemmPlan, QuantizedLinearFunction, quantized_linear_reference
from tenfold.engine.linear import QuantConv1D, QuantLinear
from tenfold.engine.ptq.metrics import EmbeddingAgreement, embedding_agreement, spearman
from tenfold.engine.ptq.quantize import PTQ_SCHEMES, InferenceLinear, quantize_for_inference
from tenfold.engine.ptq.report import KeptModule, PTQLayer, PTQReport
from tenfold.engine.recipes import BACKWARD_OVERRIDES, RECIPE_NAMES, GemmQuant, Recipe, recipe, register
from tenfold.engine.scaling import quantized_layers, reduce_amax, update_scaling
from tenfold.engine.telemetry.recorder import Recorder
from tenfold.engine.telemetry.records import TelemetryConfig

BACKENDS = GEMM_BACKENDS  # the name this tuple had before GEMM_BACKENDS; kept for existing callers

__all__ = [
    "BACKENDS",
    "BACKWARD_OVERRIDES",
    "GEMM_BACKENDS",
    "PTQ_SCHEMES",
    "RECIPE_NAMES",
    "BackendChoice",
    "ConversionPolicy",
    "ConversionReport",
    "EmbeddingAgreement",
    "ExpertGemm",
    "GemmPlan",
    "GemmQuant",
    "InferenceLinear",
    "KeptModule",
    "LayerDecision",
    "PTQLayer",
    "PTQReport",
    "PrecisionPolicy",
    "QuantConv1D",
    "QuantExperts",
    "QuantLinear",
    "QuantizedLinearFunction",
    "Recipe",
    "Recorder",
    "SensitivityRow",
    "SensitivityTable",
    "TelemetryConfig",
    "auto_policy",
    "convert",
    "embedding_agreement",
    "quantize_for_inference",
    "quantized_layers",
    "quantized_linear_reference",
    "recipe",
    "reduce_amax",
    "register",
    "select_backend",
    "sensitivity",
    "spearman",
    "update_scaling",
]
