"""tenfold: what Blackwell-class hardware is worth for your LLM workload.

Two halves joined by one workload description: `tenfold.formats` / `tenfold.engine` (block-scaled
low-precision numerics in PyTorch) and `tenfold.perf` / `tenfold.cost` (analytic planning, no torch).
"""

__version__ = "0.1.0"
