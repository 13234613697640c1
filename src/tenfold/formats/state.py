"""Delayed-scaling state for per-tensor FP8: an amax history and the scale it implies.

Transformer Engine's `DelayedScaling` recipe (TE `common/recipe/__init__.py`, `pytorch/fp8.py`): each step
quantizes with a scale computed from earlier steps' amaxes, records this step's amax in slot 0 of the
history, and at the step boundary computes the next scale from the history (`max` over the window, or
`most_recent`), then rolls the history by one and zeroes slot 0:

    scale = (fp8_max / amax) / 2^margin, kept at its old value when amax is 0 or non-finite.

The state is an explicit object (never global) that saves and restores with `state_dict()`, so a resumed
run continues with bit-identical scales (the TE#982 failure class).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import torch

from tenfold.formats.division import div


class AmaxAlgo(StrEnum):
    MAX = "max"
    MOST_RECENT = "most_recent"


@dataclass(kw_only=True, eq=False)
class AmaxHistory:
    """Amax history and current scale of one tensor role (e.g. a layer's weight).

    Fields:
        length: history window in steps (TE default 1024).
        algo: how the history becomes one amax: `max` over the window or `most_recent`.
        margin: extra power-of-two headroom: scale = (fp8_max / amax) / 2^margin.
        fp8_max: the element format's largest finite value (448 for E4M3, 57344 for E5M2).
    """

    length: int = 1024
    algo: AmaxAlgo = AmaxAlgo.MAX
    margin: int = 0
    fp8_max: float = 448.0
    history: torch.Tensor = field(init=False)
    scale: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        if self.length < 1:
            raise ValueError(f"amax history length must be >= 1, got {self.length}")
        try:
            self.algo = AmaxAlgo(self.algo)
        except ValueError:
            raise ValueError(f"amax algo {self.algo!r} is not one of: max, most_recent") from None
        if self.margin < 0:
            raise ValueError(f"margin must be >= 0, got {self.margin}")
        self.history = torch.zeros(self.length, dtype=torch.float32)
        self.scale = torch.ones((), dtype=torch.float32)

    def to(self, device: torch.device | str) -> AmaxHistory:
        self.history = self.history.to(device)
        self.scale = self.scale.to(device)
        return self

    def observe(self, amax: torch.Tensor) -> None:
        """Record the amax of a tensor quantized in the current step (slot 0 keeps the step's maximum)."""
        a = amax.detach().to(torch.float32).reshape(()).to(self.history.device)
        self.history[0] = torch.maximum(self.history[0], a)

    def window_amax(self) -> torch.Tensor:
        return self.history[0] if self.algo == AmaxAlgo.MOST_RECENT else self.history.max()

    def update(self) -> None:
        """Step boundary: new scale from the history, then roll the history and clear slot 0."""
        amax = self.window_amax()
        new = div(1.0, amax) * self.fp8_max / (2.0**self.margin)  # Python's max / amax, reproduced
        keep = (amax <= 0) | ~torch.isfinite(amax)
        self.scale = torch.where(keep, self.scale, new)
        self.history = torch.roll(self.history, -1)
        self.history[0] = 0.0

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"history": self.history.clone(), "scale": self.scale.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        history, scale = state["history"], state["scale"]
        if history.shape != (self.length,):
            raise ValueError(f"amax history of length {history.shape[0]} does not fit length {self.length}")
        self.history = history.to(torch.float32).clone()
        self.scale = scale.to(torch.float32).reshape(()).clone()
