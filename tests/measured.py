"""A measured uncertainty for tests of how ranges are shown, until the shipped calibration carries its own
(the refit writes its [uncertainty] section): `with_uncertainty(monkeypatch)` makes every default
`load_calibration()` of the training model return the shipped fit with `UNCERTAINTY`."""

import dataclasses

import tenfold.cost.compare
import tenfold.perf.calibration
import tenfold.perf.training.estimate
import tenfold.perf.training.search
from tenfold.perf.uncertainty import Uncertainty

UNCERTAINTY = Uncertainty(
    log_sigma={"hopper/dense": 0.12, "blackwell/dense": 0.20, "hopper/moe": 0.25, "blackwell/moe": 0.30},
    pooled=0.15,
    ratio_correlation=0.3,
)
SHIPPED = tenfold.perf.calibration.load_calibration


def with_uncertainty(monkeypatch, uncertainty: Uncertainty | None = UNCERTAINTY) -> None:
    """Patch the modules that load the default training calibration so that it carries `uncertainty`
    (None: a calibration without one, as before the refit)."""

    def measured(path=None, *, kind="training"):
        cal = SHIPPED(path, kind=kind)
        if kind == "training" and path is None:
            return dataclasses.replace(cal, uncertainty=uncertainty)
        return cal

    for mod in (
        tenfold.perf.calibration,
        tenfold.perf.training.estimate,
        tenfold.perf.training.search,
        tenfold.cost.compare,
    ):
        monkeypatch.setattr(mod, "load_calibration", measured)
