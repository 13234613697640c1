"""`tenfold policy FILE.toml`: print a precision policy with its FP4 share and expected GEMM speedup."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table


def policy(
    path: str = typer.Argument(..., help="a policy TOML (from tenfold.engine.auto_policy)"),
    gpu: str | None = typer.Option(None, help="catalog GPU for the speedup (default: bits proxy)"),
    as_json: bool = typer.Option(False, "--json", help="print the policy and speedup as JSON"),
) -> None:
    """Show which format each layer runs in and the expected GEMM speedup over bf16.

    Example: tenfold policy policy.toml --gpu b200
    """
    if not Path(path).is_file():
        what = "a folder" if Path(path).is_dir() else "not found"
        raise typer.BadParameter(f"PATH {path!r} is {what}; give a policy TOML file")
    from tenfold.engine.autoprecision.policy import PrecisionPolicy

    try:
        pp = PrecisionPolicy.load(path)
        speedup = pp.expected_speedup(gpu) if pp.flops else None
        frac = pp.fp4_flop_fraction(pp.flops) if pp.flops else None
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    if as_json:
        out = {
            "layers": pp.layers,
            "meta": pp.meta,
            "gpu": gpu,
            "expected_gemm_speedup": speedup,
            "fp4_flop_fraction": frac,
        }
        typer.echo(json.dumps(out))
        return
    t = Table(title=f"{path}: precision per layer")
    for col in ("layer", "format", "GEMM FLOPs share"):
        t.add_column(col, no_wrap=True)
    total = sum(pp.flops.values()) if pp.flops else 0.0
    for n, f in pp.layers.items():
        t.add_row(n, f, f"{pp.flops[n] / total:.1%}" if total else "-")
    c = Console(width=max(Console().width, 100))
    c.print(t)
    counts = Counter(pp.layers.values())
    c.print(", ".join(f"{k}: {v} layers" for k, v in sorted(counts.items())))
    if speedup is not None:
        basis = gpu or "the FLOP x bits proxy"
        c.print(
            f"FP4 share of GEMM FLOPs {frac:.1%}; expected GEMM speedup vs bf16 on {basis}: {speedup:.2f}x"
        )
