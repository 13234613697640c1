"""Measured kernel tables: GEMM efficiency and NCCL bandwidth from NVIDIA's aiconfigurator-core.

Also, imported from their modules: `measured.serving` (MoE, MLA and GQA decode kernel times) and
`measured.peer` (aiconfigurator's own end-to-end serving estimate of a row, `benchmarks/serving_peer.py`).

A dependency of tenfold: the committed training calibration prices routed experts' GEMMs from its tables.
Everything here returns None (or `available()` False) when the package is absent, and the model then falls
back to flat GEMM efficiencies. See docs/perf.md, "Measured kernel tables".
"""

from tenfold.perf.measured.gemm import gemm_efficiency, layer_gemm_efficiency
from tenfold.perf.measured.nccl import collective_bus_bandwidth
from tenfold.perf.measured.prior import prior_calibration
from tenfold.perf.measured.tables import available

__all__ = [
    "available",
    "collective_bus_bandwidth",
    "gemm_efficiency",
    "layer_gemm_efficiency",
    "prior_calibration",
]
