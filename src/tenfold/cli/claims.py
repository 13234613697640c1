"""`tenfold claims`: NVIDIA's 4x training and 30x inference claims reproduced and decomposed, the article's
estimate checked, and the model's speedups beside measured Megatron-Bridge pairs."""

from __future__ import annotations

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from tenfold.cli.output import EXIT_INFEASIBLE, fail, print_json, progress_bar
from tenfold.cost.claims.nvidia import ClaimsReport, Decomposition, check_claims
from tenfold.perf.errors import Infeasible


def decomposition_tables(d: Decomposition) -> list[Table]:
    steps = Table(
        title=f"{d.claim}: claimed {d.claimed:g}x, model {d.model_ratio:.2f}x",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for col in ("configuration", "tok/s/GPU", "plan"):
        steps.add_column(col, justify="right" if col == "tok/s/GPU" else "left")
    for s in d.steps:
        steps.add_row(s.label, f"{s.tokens_per_s_per_gpu:,.2f}", s.plan)
    factors = Table(
        title="decomposition (the factors multiply to the model ratio)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for col in ("factor", "value", "from", "meaning"):
        factors.add_column(col, justify="right" if col == "value" else "left")
    for f in d.factors:
        factors.add_row(f.name, f"{f.value:.2f}x", f.source, f.meaning)
    factors.add_row("product", f"{d.product:.2f}x", "", f"conditions: {d.conditions}")
    return [steps, factors]


def print_claims(r: ClaimsReport, console: Console) -> None:
    for t in decomposition_tables(r.training):
        console.print(t)
    for n in r.training.notes:
        console.print(f"  {n}", style="dim")
    inf = r.inference
    for t in decomposition_tables(inf.decomposition):
        console.print(t)
    for n in inf.decomposition.notes:
        console.print(f"  {n}", style="dim")
    if inf.sweep:
        sw = Table(
            title="30x claim against interactivity (ratio GB200 NVFP4 / H100 FP8 per GPU)",
            title_justify="left",
            box=box.SIMPLE_HEAD,
        )
        for col in ("tok/s/user", "H100 FP8 tok/s/GPU", "GB200 NVFP4 tok/s/GPU", "ratio"):
            sw.add_column(col, justify="right")
        for a, b, c, d in inf.sweep:
            sw.add_row(f"{a:g}", f"{b:,.2f}", f"{c:,.2f}", f"{d:.1f}x")
        console.print(sw)
    article = Table(
        title=f"The article's estimate (B200 vs H100) on {r.article.num_gpus:,} GPUs",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for col in ("statement", "implies", "held fixed", "the model gives", "verdict"):
        article.add_column(col)
    for c in r.article.checks:
        article.add_row(c.statement, c.implies, c.held_fixed, c.model, c.verdict)
    console.print(article)
    m = Table(
        title="Per-GPU training speedup over H100: model vs measured (Megatron-Bridge)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for col in ("pair", "measured", "model", "error"):
        m.add_column(col, justify="left" if col == "pair" else "right")
    for c in r.measured:
        m.add_row(c.pair.name, f"{c.pair.measured:.2f}x", f"{c.predicted:.2f}x", f"{c.error:+.1%}")
    console.print(m)


def claims(
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of tables"),
) -> None:
    """Reproduce NVIDIA's GB200 NVL72 claims (4x training, 30x inference) under their stated conditions,
    split each into per-GPU spec, precision, scale-up domain and utilisation; check the article's estimate
    (4x, 3 months -> 3 weeks, 60 % of the GPUs); set the model's speedups beside measured ones.

    Example: tenfold claims --json > claims.json
    """
    console = Console()
    with progress_bar("checking claims", hidden=as_json) as progress:
        try:
            result = check_claims(progress=progress)
        except Infeasible as exc:  # a scenario of the claims found no layout that fits
            raise fail(str(exc), EXIT_INFEASIBLE) from None
    if as_json:
        print_json(result.to_dict())
    else:
        print_claims(result, console)
