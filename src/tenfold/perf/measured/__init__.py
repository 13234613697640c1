"""Measured kernel tables (optional): GEMM efficiency and NCCL bandwidth from NVIDIA's aiconfigurator-core.

Also, imported from their modules: `measured.serving` (MoE, MLA and GQA decode kernel times) and
`measured.peer` (aiconfigurator's own end-to-end serving estimate of a row, `benchmarks/serving_peer.py`).

Install with `pip install tenfold[measured]`. Everything here returns None (or `available()` False) when
the package is absent; nothing else in tenfold needs it. See docs/perf.md, "Measured kernel tables".
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
