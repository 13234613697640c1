"""Loss-curve figures (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def smooth(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average (the first points average what exists so far)."""
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def plot_loss_curves(
    curves: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    path: str | Path,
    *,
    title: str = "",
    val: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None,
    smoothing: int = 20,
) -> Path:
    """One PNG: smoothed training loss per curve (steps, losses), validation points when given."""
    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=110)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, (steps, losses)) in enumerate(curves.items()):
        color = colors[i % len(colors)]
        ax.plot(steps, smooth(list(losses), smoothing), label=name, color=color, linewidth=1.2)
        if val and name in val:
            vs, vl = val[name]
            ax.plot(vs, vl, "o", color=color, markersize=3)
    ax.set_xlabel("step")
    ax.set_ylabel(f"training loss (moving average of {smoothing}); dots: validation")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    all_losses = [v for _, ls in curves.values() for v in ls]
    if all_losses:
        tail = sorted(all_losses)
        ax.set_ylim(tail[0] * 0.97, tail[int(len(tail) * 0.9)] * 1.05 if len(tail) > 10 else tail[-1] * 1.05)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out
