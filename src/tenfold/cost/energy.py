"""Energy and carbon of a job: facility energy = IT energy x PUE, carbon = facility energy x grid intensity.

    E_facility [MWh] = GPU-hours x P_it [kW] x PUE / 1000
    CO2 [t]          = E_facility [MWh] x grid [g/kWh] / 1000        (1 MWh = 1000 kWh, 1 t = 1e6 g)

P_it is the IT power of a working GPU (tco.OwnInputs.it_kW: server share incl. host and network). The grid
intensity is applied at the facility meter (IT x PUE: the grid supplies the cooling and power conversion too;
the EIA's figure, https://www.eia.gov/tools/faqs/faq.php?id=74, is per kWh generated); embodied carbon of the
hardware is not included (not researched).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Footprint:
    """A job's energy and carbon. it_MWh: IT energy; facility_MWh: IT x PUE; co2_t: tonnes of CO2."""

    gpu_hours: float
    it_kW: float
    pue: float
    grid_g_per_kWh: float
    it_MWh: float
    facility_MWh: float
    co2_t: float


def footprint(*, gpu_hours: float, it_kW: float, pue: float, grid_g_per_kWh: float) -> Footprint:
    """Energy and carbon of `gpu_hours` GPU-hours at `it_kW` per GPU (module docstring)."""
    for key, v in (("gpu_hours", gpu_hours), ("it_kW", it_kW), ("grid_g_per_kWh", grid_g_per_kWh)):
        if not v >= 0:
            raise ValueError(f"{key} must be >= 0, got {v}")
    if not pue >= 1:
        raise ValueError(f"pue must be >= 1, got {pue}")
    it = gpu_hours * it_kW / 1e3
    facility = it * pue
    return Footprint(
        gpu_hours=gpu_hours,
        it_kW=it_kW,
        pue=pue,
        grid_g_per_kWh=grid_g_per_kWh,
        it_MWh=it,
        facility_MWh=facility,
        co2_t=facility * grid_g_per_kWh / 1e3,
    )
