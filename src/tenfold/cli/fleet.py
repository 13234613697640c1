"""`tenfold fleet plan FILE.toml`: place jobs on Hopper and Blackwell pools at least cost (or makespan)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from tenfold.cli.output import EXIT_INFEASIBLE, fail, print_json, progress_bar, readable_file
from tenfold.cost.fleet import FleetPlan, Plan, load_fleet, plan_fleet
from tenfold.perf.errors import Infeasible

app = typer.Typer(help="Plan a fleet of GPU pools.", no_args_is_help=True)
FILE_ARGUMENT = typer.Argument(..., help="fleet TOML: [[pool]] and [[job]] tables (see examples/fleet.toml)")


@app.callback()
def _group() -> None:
    """Fleet planning."""


def plan_table(p: Plan) -> Table:
    t = Table(title=p.label, title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("job", "pool", "GPUs", "days", "cost $M", "precision", "plan"):
        t.add_column(col, justify="right" if col in ("GPUs", "days", "cost $M") else "left")
    for a in p.assignments:
        t.add_row(
            a.job, a.pool, f"{a.num_gpus:,}", f"{a.days:,.1f}", f"{a.usd / 1e6:,.2f}", a.precision, a.plan
        )
    return t


def print_fleet(r: FleetPlan, console: Console) -> None:
    prices = ", ".join(f"{k} ${v:.2f}" for k, v in r.pool_prices_usd_per_gpu_hour.items())
    console.print(f"$/GPU-hour by pool: {prices}")
    for p in (r.best, *r.naive):
        if p.feasible:
            console.print(plan_table(p))
        else:
            console.print(f"[bold]{p.label}[/bold]: [red]infeasible[/red]: {p.reason}")
    s = Table(title="plans side by side", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("plan", "total $M", "training makespan d", "GPUs used", "cost vs optimal"):
        s.add_column(col, justify="left" if col == "plan" else "right")
    for p in (r.best, *r.naive):
        if not p.feasible:
            s.add_row(p.label, "infeasible", "-", "-", "-")
            continue
        used = ", ".join(f"{k} {v:,}" for k, v in p.gpus_used.items())
        ratio = p.total_usd / r.best.total_usd if r.best.feasible else math.nan
        s.add_row(p.label, f"{p.total_usd / 1e6:,.2f}", f"{p.makespan_days:,.1f}", used, f"{ratio:.2f}x")
    console.print(s)


@app.command("plan")
def plan(
    file: Path = FILE_ARGUMENT,
    objective: str = typer.Option("", help="cost | makespan (default: the file's `objective`)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of tables"),
) -> None:
    """Assign each job to a pool and a GPU count at least total cost (or shortest makespan), within pool
    sizes and deadlines, by an exact MILP (HiGHS via scipy); set beside the naive plans "all on the newest
    GPUs" and "all on the cheapest".

    Example: tenfold fleet plan examples/fleet.toml --objective makespan

    Exit codes: 0 planned, 1 infeasible (the failing constraint is printed), 2 bad input.
    """
    console = Console()
    readable_file("FILE", file)
    try:
        spec = load_fleet(file)
        if objective:
            spec = replace(spec, objective=objective)
        with progress_bar("jobs x pools", hidden=as_json) as progress:
            result = plan_fleet(spec, progress=progress)
    except (ValueError, OSError) as exc:
        raise fail(f"{file}: {exc}") from exc
    except Infeasible as exc:  # the serving search found nothing that runs
        raise fail(f"infeasible: {exc}", EXIT_INFEASIBLE) from exc
    if as_json:
        print_json(result.to_dict())
    else:
        print_fleet(result, console)
    if not result.best.feasible:
        raise typer.Exit(EXIT_INFEASIBLE)
