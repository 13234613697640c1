"""Accelerator catalog: datasheet figures converted once to SI (FLOP/s, bytes, bytes/s, W, $).

Every figure is dense (never the 2:4-sparsity number) and per GPU; scale-up bandwidth is per direction
(NVIDIA's "900 GB/s" / "1.8 TB/s" are bidirectional totals). Files: `tenfold/data/hardware/*.toml`, one per
accelerator, each number with its source URL and a confidence grade (see the README there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tenfold.perf.specs.catalog import GB, GiB, Sourced, catalog_entries, read_toml, resolve, sourced

PRECISION_KEYS = ("bf16", "fp16", "fp8", "fp6", "fp4", "tf32")


@dataclass(frozen=True, kw_only=True)
class Hardware:
    """One accelerator as the performance and cost models see it. Build with `load_hardware(name)`.

    Fields (SI units):
        name, display_name, vendor, arch, year: identity; `arch` keys the calibration
            (ampere, hopper, blackwell, blackwell-ultra, cdna3, cdna4, tpu).
        peak_flops: dense FLOP/s by precision key (bf16, fp16, fp8, fp6, fp4, tf32); missing = no such
            tensor-core rate.
        block_scaled_formats: block-scaled formats with hardware support (mxfp8, mxfp6, mxfp4, nvfp4).
        hbm_bytes, hbm_Bps: usable HBM capacity and bandwidth.
        scaleup_Bps: scale-up (NVLink/xGMI/ICI) bandwidth per GPU per direction.
        scaleup_domain: GPUs in one scale-up domain (8 for HGX, 72 for NVL72).
        scaleout_Bps: scale-out network bandwidth per GPU per direction (0 if unknown).
        exp_per_s: special-function-unit exponentials per second (softmax in flash attention).
        sm_count: streaming multiprocessors enabled on the part (None where the catalog has no figure);
            the grouped-GEMM model (serving/grouped_gemm.py) spreads its per-tile fixed cost over them.
        tdp_W, allin_W: board power and all-in provisioned power per GPU (incl. host, network, facility).
        ondemand_usd_h, reserved_usd_h, capex_usd, gpu_price_usd, tco_usd_h: prices for the cost model
            (per GPU-hour or per GPU; None when no published figure was found).
        sources: the catalog entry behind each field above ("peak_flops.fp8", "hbm_Bps", ...).
    """

    name: str
    display_name: str
    vendor: str
    arch: str
    year: int
    peak_flops: MappingProxyType
    block_scaled_formats: tuple[str, ...]
    hbm_bytes: float
    hbm_Bps: float
    scaleup_Bps: float
    scaleup_domain: int
    scaleout_Bps: float
    exp_per_s: float
    tdp_W: float | None = None
    allin_W: float | None = None
    ondemand_usd_h: float | None = None
    reserved_usd_h: float | None = None
    capex_usd: float | None = None
    gpu_price_usd: float | None = None
    tco_usd_h: float | None = None
    sm_count: int | None = None
    sources: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        for key in ("hbm_bytes", "hbm_Bps", "scaleup_Bps"):
            if not getattr(self, key) > 0:
                raise ValueError(f"{self.name}: {key} must be > 0, got {getattr(self, key)}")
        if self.scaleup_domain < 1:
            raise ValueError(f"{self.name}: scaleup_domain must be >= 1, got {self.scaleup_domain}")
        if "bf16" not in self.peak_flops:
            raise ValueError(f"{self.name}: needs a dense bf16 peak")

    def peak(self, key: str) -> float:
        """Dense peak FLOP/s for a precision key; ValueError naming the supported keys if absent."""
        if key not in self.peak_flops:
            have = ", ".join(self.peak_flops)
            raise ValueError(f"{self.name} has no {key} tensor-core rate (it has: {have})")
        return self.peak_flops[key]

    @property
    def hbm_GiB(self) -> float:
        """Usable HBM capacity in GiB."""
        return self.hbm_bytes / GiB

    @property
    def placement_domain(self) -> int:
        """GPUs per scale-up domain that a job's groups are laid out on: the largest power of two not above
        the domain (64 of an NVL72's 72; jobs use power-of-two group sizes and leave the rest as spares)."""
        d = 1
        while d * 2 <= self.scaleup_domain:
            d *= 2
        return d


def _get(d: dict[str, Any], section: str, key: str, where: str) -> Sourced | None:
    sec = d.get(section, {})
    if key not in sec:
        return None
    return sourced(sec[key], where=f"{where} [{section}] {key}")


def hardware_from_dict(d: dict[str, Any], *, where: str = "<dict>") -> Hardware:
    """Build a `Hardware` from the parsed TOML layout (see tenfold/data/hardware/README.md)."""
    srcs: dict[str, Sourced] = {}

    def need(section: str, key: str) -> Sourced:
        s = _get(d, section, key, where)
        if s is None:
            raise ValueError(f"{where}: missing [{section}] {key}")
        return s

    def opt(section: str, key: str, label: str, scale: float = 1.0) -> float | None:
        s = _get(d, section, key, where)
        if s is None:
            return None
        srcs[label] = s
        return float(s.value) * scale

    peaks = {}
    for key, entry in d.get("peak_dense_tflops", {}).items():
        if key not in PRECISION_KEYS:
            raise ValueError(f"{where}: unknown precision key {key!r} in [peak_dense_tflops]")
        s = sourced(entry, where=f"{where} [peak_dense_tflops] {key}")
        srcs[f"peak_flops.{key}"] = s
        peaks[key] = float(s.value) * 1e12
    hbm = need("memory", "hbm_GiB")
    bw = need("memory", "hbm_TBps")
    up = need("scale_up", "unidir_GBps")
    dom = need("scale_up", "domain_size")
    srcs.update(hbm_bytes=hbm, hbm_Bps=bw, scaleup_Bps=up, scaleup_domain=dom)
    exp = _get(d, "softmax", "exp_per_s", where)
    if exp is not None:
        srcs["exp_per_s"] = exp
    # Without a figure the exponentials are taken as free (never the limit, never an added cost): AMD and
    # TPU parts have no published special-function rate in the catalog.
    exp_rate = float(exp.value) if exp is not None else math.inf
    allin_kw = opt("power", "allin_kW", "allin_W", 1e3)
    return Hardware(
        name=str(d["name"]),
        display_name=str(d.get("display_name", d["name"])),
        vendor=str(d.get("vendor", "")),
        arch=str(d.get("arch", "unknown")),
        year=int(d.get("year", 0)),
        peak_flops=MappingProxyType(peaks),
        block_scaled_formats=tuple(d.get("block_scaled_formats", ())),
        # The catalog holds GiB: vendor HBM "GB" labels count binary gigabytes (an "80 GB" H100 is five
        # 16 GiB HBM3 stacks and shows 79.6 GiB to CUDA).
        hbm_bytes=float(hbm.value) * GiB,
        hbm_Bps=float(bw.value) * 1e12,
        scaleup_Bps=float(up.value) * GB,
        scaleup_domain=int(dom.value),
        scaleout_Bps=opt("scale_out", "GBps_per_gpu", "scaleout_Bps", GB) or 0.0,
        exp_per_s=exp_rate,
        tdp_W=opt("power", "tdp_W", "tdp_W"),
        allin_W=allin_kw,
        ondemand_usd_h=opt("price", "ondemand_usd_per_gpu_hour", "ondemand_usd_h"),
        reserved_usd_h=opt("price", "reserved_usd_per_gpu_hour", "reserved_usd_h"),
        capex_usd=opt("price", "capex_usd_per_gpu", "capex_usd"),
        gpu_price_usd=opt("price", "gpu_price_usd", "gpu_price_usd"),
        tco_usd_h=opt("price", "tco_semianalysis_usd_per_gpu_hour", "tco_usd_h"),
        sm_count=int(sms) if (sms := opt("compute", "sm_count", "sm_count")) else None,
        sources=MappingProxyType(srcs),
    )


def load_hardware(name_or_path: str | Path) -> Hardware:
    """A catalog accelerator by name (`h100-sxm`, `gb200`, ...) or from a TOML file of the same layout."""
    path = resolve("hardware", name_or_path)
    return hardware_from_dict(read_toml(path), where=str(getattr(path, "name", path)))


def list_hardware() -> list[str]:
    """Names of the shipped accelerators."""
    return list(catalog_entries("hardware"))
