"""`tenfold demo`: every block-scaled format's error on a weight-like tensor, as a table."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from tenfold.cli.output import check_memory

if TYPE_CHECKING:
    from tenfold.formats import QuantizedTensor


def format_bits(q: QuantizedTensor) -> float:
    """Bits per element of the format itself (element bits plus amortised scales), not our byte storage."""
    scale_bits = 8 * q.scales.element_size() * q.scales.numel() + (32 if q.amax is not None else 0)
    return q.scheme.element.bits + scale_bits / q.numel


def demo(
    rows: int = typer.Option(1024, help="rows of the weight-like tensor"),
    cols: int = typer.Option(1024, help="columns of the weight-like tensor"),
    seed: int = typer.Option(0, help="random seed"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """Quantize a weight-like tensor with every scheme and print SQNR, relative error and bits/element.

    Example: tenfold demo --rows 512 --cols 2048
    """
    if rows < 1 or cols < 1:
        raise typer.BadParameter(f"rows and cols must be >= 1, got {rows}x{cols}")
    try:  # the tensor, its working copy, tiles, rounded values, dequantized values and error: fp32 each
        check_memory(6 * 4 * rows * cols, f"--rows {rows} x --cols {cols}")
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    # torch is imported here, not at module level, so planning commands start without it
    from tenfold.formats import SCHEME_NAMES, quantize, scheme
    from tenfold.formats.metrics import sqnr_db, weight_like

    w = weight_like(rows, cols, seed=seed)
    results = []
    variants = [(name, {}) for name in SCHEME_NAMES] + [
        ("mxfp8_e4m3", {"scale_mode": "rceil"}),
        ("mxfp4", {"scale_mode": "rceil"}),
        ("nvfp4", {"hadamard": True}),
    ]
    for name, options in variants:
        s = scheme(name, **options)
        q = quantize(w, s)
        wq = q.dequantize()
        rel = ((wq - w).norm() / w.norm()).item()
        label = name + "".join(f" {k}={v}" for k, v in options.items())
        results.append(
            {
                "scheme": label,
                "element": s.element.name,
                "block": "x".join(str(b) if b else "all" for b in s.block),
                "bits_per_element": round(format_bits(q), 3),
                "sqnr_db": round(sqnr_db(w, wq), 2),
                "rel_error": rel,
                "max_abs_error": (wq - w).abs().max().item(),
            }
        )
    if as_json:
        typer.echo(json.dumps({"shape": [rows, cols], "results": results}, indent=2))
        return
    table = Table(
        title=f"Block-scaled formats on a {rows}x{cols} weight-like tensor (heavy tails, outlier channels)"
    )
    for col in ("scheme", "elem", "block", "bits", "SQNR dB", "rel err", "max err"):
        left = col in ("scheme", "elem", "block")
        table.add_column(col, justify="left" if left else "right", no_wrap=True)
    for r in sorted(results, key=lambda r: -r["sqnr_db"]):
        table.add_row(
            r["scheme"],
            r["element"],
            r["block"],
            f"{r['bits_per_element']:.2f}",
            f"{r['sqnr_db']:.1f}",
            f"{r['rel_error']:.4f}",
            f"{r['max_abs_error']:.3g}",
        )
    Console().print(table)
