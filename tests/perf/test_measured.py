"""Measured kernel tables (optional aiconfigurator-core): mappings, GEMM efficiency, NCCL bandwidth, prior."""

import math
import subprocess
import sys

import numpy as np
import pytest

from tenfold.perf.calibration import load_calibration
from tenfold.perf.measured import tables
from tenfold.perf.measured.gemm import gemm_efficiency, layer_gemm_efficiency
from tenfold.perf.measured.nccl import collective_bus_bandwidth
from tenfold.perf.measured.prior import measured_gemm_prior, prior_calibration
from tenfold.perf.specs.models import load_model


@pytest.fixture
def tables_installed():
    pytest.importorskip("aiconfigurator_core")
    pytest.importorskip("pyarrow")


def test_hardware_and_precision_mapping():
    assert tables.gemm_system("h100-sxm") == "h100_sxm"
    assert tables.gemm_system("h800") == "h100_sxm"  # same SMs and clocks: GEMMs only
    assert tables.comm_system("h800") is None  # its NVLink is cut: not the H100's collectives
    assert tables.gemm_system("gb300") == "gb300"
    assert tables.gemm_system("mi300x") is None
    assert tables.gemm_dtype("a100_sxm", "fp16") == "bfloat16"
    assert tables.gemm_dtype("h100_sxm", "fp8") == "fp8"
    assert tables.gemm_dtype("b200_sxm", "mxfp8") == "fp8_block"
    assert tables.gemm_dtype("h100_sxm", "mxfp8") is None  # no MXFP8 tensor cores on Hopper
    assert tables.gemm_dtype("h200_sxm", "nvfp4") is None
    assert tables.gemm_dtype("gb200", "nvfp4") == "nvfp4"
    assert tables.gemm_dtype("b200_sxm", "mxfp4") is None


def test_everything_is_none_without_the_package(monkeypatch):
    tables.gemm_table.cache_clear()
    tables.nccl_table.cache_clear()
    monkeypatch.setattr(tables, "available", lambda: False)
    try:
        assert tables.data_root() is None
        assert gemm_efficiency("h100-sxm", "bf16", 8192, 8192, 8192) is None
        assert collective_bus_bandwidth("h100-sxm", "all_reduce", 8, 2**30) is None
        assert prior_calibration() is None
    finally:
        tables.gemm_table.cache_clear()
        tables.nccl_table.cache_clear()


def test_h100_bf16_efficiency_large_vs_tiny(tables_installed):
    large = gemm_efficiency("h100-sxm", "bf16", 8192, 8192, 8192)
    tiny = gemm_efficiency("h100-sxm", "bf16", 16, 256, 256)
    assert large is not None and 0.0 < large <= 1.0
    assert tiny is not None and 0.0 < tiny < large


def test_none_where_no_table(tables_installed):
    assert gemm_efficiency("mi300x", "bf16", 4096, 4096, 4096) is None
    assert gemm_efficiency("no-such-gpu", "bf16", 4096, 4096, 4096) is None
    assert gemm_efficiency("a100-80gb", "fp8", 4096, 4096, 4096) is None  # no FP8 on Ampere
    assert gemm_efficiency("h100-sxm", "mxfp8", 4096, 4096, 4096) is None


def test_interpolation_lies_between_measured_neighbours(tables_installed):
    table = tables.gemm_table("h100_sxm", "bfloat16")
    axes = [np.exp(a) for a in (table.log_m, table.log_n, table.log_k)]
    # a cell well inside the grid, and a point strictly inside it
    lo = [ax[np.searchsorted(ax, v) - 1] for ax, v in zip(axes, (3000.0, 6000.0, 6000.0), strict=True)]
    hi = [ax[np.searchsorted(ax, v)] for ax, v in zip(axes, (3000.0, 6000.0, 6000.0), strict=True)]
    corners = [
        gemm_efficiency("h100-sxm", "bf16", *(hi[a] if (c >> a) & 1 else lo[a] for a in range(3)))
        for c in range(8)
    ]
    mid = gemm_efficiency("h100-sxm", "bf16", 3000.0, 6000.0, 6000.0)
    assert min(corners) <= mid <= max(corners)
    assert len({round(c, 6) for c in corners}) > 1  # the neighbours differ, so the check has teeth
    # along one axis the interpolated value is also between its two neighbours
    a = gemm_efficiency("h100-sxm", "bf16", 4096, 8192, 8192)
    b = gemm_efficiency("h100-sxm", "bf16", 8192, 8192, 8192)
    m = gemm_efficiency("h100-sxm", "bf16", 6000, 8192, 8192)
    assert min(a, b) <= m <= max(a, b)


def test_layer_efficiency(tables_installed):
    llama = load_model("llama3-70b")
    big = layer_gemm_efficiency("h100-sxm", "bf16", llama, tp=4, tokens=8192)
    small = layer_gemm_efficiency("h100-sxm", "bf16", llama, tp=8, tokens=256)
    assert 0.0 < small < big <= 1.0
    assert layer_gemm_efficiency("mi300x", "bf16", llama, tp=4, tokens=8192) is None
    # MoE: more expert-parallel ranks bring each local expert more tokens (fewer, larger GEMMs)
    moe = load_model("mixtral-8x7b")
    ep1 = layer_gemm_efficiency("h100-sxm", "bf16", moe, tp=1, tokens=1024, ep=1)
    ep8 = layer_gemm_efficiency("h100-sxm", "bf16", moe, tp=1, tokens=1024, ep=8)
    assert 0.0 < ep1 < ep8


def test_nccl_bus_bandwidth(tables_installed):
    small = collective_bus_bandwidth("h100-sxm", "all_reduce", 8, 2**20)
    large = collective_bus_bandwidth("h100-sxm", "all_reduce", 8, 2**30)
    assert 0.0 < small < large
    ag = collective_bus_bandwidth("b200", "all_gather", 8, 2**30)
    assert ag is not None and ag > 0
    assert collective_bus_bandwidth("gb200", "all_reduce", 8, 2**30) is None  # tables stop at 4 GPUs
    assert collective_bus_bandwidth("h800", "all_reduce", 8, 2**30) is None
    with pytest.raises(ValueError, match="unknown collective"):
        collective_bus_bandwidth("h100-sxm", "broadcast", 8, 2**30)


def test_prior_calibration(tables_installed):
    base = load_calibration()
    prior = prior_calibration()
    assert set(prior.gemm_efficiency) == set(base.gemm_efficiency)
    lo, hi = base.GEMM_BOUNDS
    for key, value in prior.gemm_efficiency.items():
        measured = measured_gemm_prior(*key.split("/"))
        assert measured is not None, key
        assert math.isclose(value, min(max(measured, lo), hi)), key
    assert prior.hbm_efficiency == base.hbm_efficiency
    assert prior.kernel_overhead_us == base.kernel_overhead_us


def test_measured_does_not_import_torch(tables_installed):
    code = (
        "import sys\n"
        "from tenfold.perf.measured import gemm_efficiency, collective_bus_bandwidth, prior_calibration\n"
        "gemm_efficiency('h100-sxm', 'bf16', 4096, 4096, 4096)\n"
        "collective_bus_bandwidth('h100-sxm', 'all_reduce', 8, 2**20)\n"
        "prior_calibration()\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
