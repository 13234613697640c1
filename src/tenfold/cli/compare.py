"""`tenfold compare`: one workload (or the embedded default) on several GPUs, side by side in days, money,
energy and carbon, with ratios against H100."""

from __future__ import annotations

import math
from pathlib import Path

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from tenfold.cli.calibrate import CALIBRATION_HELP, user_calibration
from tenfold.cli.output import EXIT_INFEASIBLE, check_range, fail, print_json, progress_bar, writable_file
from tenfold.cost.compare import compare_default, compare_training
from tenfold.cost.compare_serving import compare_serving
from tenfold.cost.results import Comparison, ComparisonSet
from tenfold.cost.workloads import (
    DEFAULT_GPUS,
    CostSettings,
    ServingWorkload,
    TrainingWorkload,
    parse_count,
)
from tenfold.perf.defaults import MAX_BATCH, MAX_GPUS, MAX_SEQ, TRAINING
from tenfold.perf.errors import Infeasible
from tenfold.perf.specs.models import load_model
from tenfold.perf.training.export import FRAMEWORKS, export_plan
from tenfold.report.compare import comparison_rows, uncalibrated_note
from tenfold.report.ranges import interval_note

OWN_OPTION = typer.Option([], "--own", help="owner input KEY=VALUE (pue=1.3, life_years=6, ...)")
PRICE_OPTION = typer.Option([], "--price", help="GPU:KEY=VALUE (gb200:reserved_usd_h=5.5; capex_usd, it_kW)")
REPORT_OPTION = typer.Option(
    None, "--report", help="write a self-contained HTML report (tables, charts, tornado) to this file"
)


def parse_pairs(items: list[str], what: str) -> dict[str, float]:
    """['pue=1.3', 'life_years=6'] -> {'pue': 1.3, 'life_years': 6.0}."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"{what} wants KEY=VALUE, got {item!r}")
        try:
            v = float(value)
        except ValueError:
            raise ValueError(f"{what} {key.strip()}: not a number: {value!r}") from None
        if not math.isfinite(v):
            raise ValueError(f"{what} {key.strip()}: must be a finite number, got {value!r}")
        out[key.strip()] = v
    return out


def parse_prices(items: list[str]) -> dict[str, dict[str, float]]:
    """['gb200:reserved_usd_h=5.5'] -> {'gb200': {'reserved_usd_h': 5.5}}."""
    out: dict[str, dict[str, float]] = {}
    for item in items:
        gpu, sep, rest = item.partition(":")
        if not sep:
            raise ValueError(f"--price wants GPU:KEY=VALUE, got {item!r}")
        out.setdefault(gpu.strip(), {}).update(parse_pairs([rest], "--price"))
    return out


def comparison_tables(c: Comparison) -> list[tuple[str, Table]]:
    """The side-by-side numbers of one comparison (the report's cells, `comparison_rows`) as two titled
    tables that fit 80 columns: time (GPUs, days, MFU or tok/s, GPU-hours, speedup) and money (rent, own,
    energy, carbon, cost ratios). The plans are printed under them; numbers fold rather than being cut.
    Titles are returned beside the tables, not inside them: rich lays a title out at the table's width,
    which the columns' minimum widths can push past the console's, and the console then cuts it."""
    columns, rows = comparison_rows(c)
    money = ("rent $M", "own $M", "MWh", "tCO2", "rent cost", "own cost", "$/M tok (rent)")
    groups = (
        ("time", [i for i, col in enumerate(columns[:-1]) if col not in money]),
        ("money", [0] + [i for i, col in enumerate(columns) if col in money]),
    )
    tables = []
    for name, idx in groups:
        title = c.title if name == "time" else f"money, energy and carbon ({c.settings.rent_basis} rent)"
        t = Table(box=box.SIMPLE_HEAD, padding=(0, 1))
        for i in idx:
            col = columns[i]
            # never narrower than its longest word, so a range like (312.5-425.1) wraps whole, not cut
            longest = max((len(w) for r in rows for w in r[i].split()), default=1) if i >= 2 else None
            t.add_column(
                col.replace(" ", "\n"),
                justify="left" if i < 2 else "right",
                overflow="fold",
                min_width=longest,
            )
        for r in rows:
            t.add_row(*(r[i] for i in idx))
        tables.append((title, t))
    return tables


def plan_exports(comps: tuple[Comparison, ...], framework: str) -> list[dict]:
    """Each training comparison's chosen plans as `framework` launch arguments (perf.training.export), one
    dict per GPU with a plan: workload title, GPU, framework, text ('' and a reason where the framework
    cannot express the plan)."""
    out = []
    for c in comps:
        if c.kind != "training":
            continue
        layers = load_model(c.workload.model).layers
        for r in c.rows:
            if r.estimate is None:
                continue
            try:
                text, reason = export_plan(r.estimate, framework, layers=layers), ""
            except Infeasible as exc:  # the framework cannot express this plan
                text, reason = "", str(exc)
            out.append(
                {"workload": c.title, "gpu": r.hardware, "framework": framework, "text": text}
                | ({"reason": reason} if reason else {})
            )
    return out


def print_comparison(c: Comparison, console: Console, tornado: bool = False) -> None:
    for title, t in comparison_tables(c):
        console.print(Text(title, style="italic"))
        console.print(t)
    for d in c.summary():
        if d["feasible"]:
            console.print(f"  {d['hardware']}: {d['plan']}", style="dim")
        else:
            console.print(f"  {d['hardware']}: [red]no plan: {escape(d['reason'])}[/red]")
    if c.kind == "serving":
        how = f"speedup = tok/s/GPU / {c.baseline}'s at the same interactivity; cost = $/M tokens ratio"
    elif c.mode == "fixed":
        how = f"speedup = per-GPU throughput / {c.baseline}'s at equal GPU count; MFU = share of the chosen "
        how += "precision's dense peak"
    else:
        how = f"speedup = {c.baseline} GPU-hours / GPU-hours, each at the fewest GPUs meeting the deadline"
    console.print(f"  {how}; carbon at {c.grid_g_per_kWh:g} g CO2/kWh", style="dim")
    note = uncalibrated_note(c)
    if note:
        console.print(f"  {escape(note)}", style="yellow")
    ranges = interval_note(c)
    if ranges:
        console.print(f"  {escape(ranges)}", style="dim")
    if tornado:
        for r in c.rows:
            if r.money and r.money.tornado_own:
                console.print(tornado_table(r.hardware, r.money.tornado_own))


def tornado_table(name: str, tor) -> Table:
    t = Table(title=f"{name}: owned cost ${tor.base_cost_usd / 1e6:,.1f}M, sensitivity", title_justify="left")
    for col in ("input", "low", "high", "cost at low $M", "cost at high $M", "swing $M"):
        t.add_column(col, justify="right" if col != "input" else "left")
    for b in tor.bars:
        t.add_row(
            b.label,
            f"{b.low_value:g}",
            f"{b.high_value:g}",
            f"{b.cost_at_low_usd / 1e6:,.1f}",
            f"{b.cost_at_high_usd / 1e6:,.1f}",
            f"{b.swing_usd / 1e6:,.1f}",
        )
    return t


def check_inputs(
    report: Path | None,
    num_gpus: int,
    deadline_days: float,
    seq_len: int,
    global_batch: int,
    *,
    serve: bool,
    tokens: str,
) -> None:
    """The checks that need no model, before any work: the report path, the work bounds, training-only
    flags under --serve (exit 2 naming the flag)."""
    if report is not None:
        writable_file("--report", report)
    check_range("--num-gpus", num_gpus, 0, MAX_GPUS)
    check_range("--deadline-days", deadline_days, 0)
    check_range("--seq-len", seq_len, 1, MAX_SEQ)
    check_range("--global-batch", global_batch, 1, MAX_BATCH)
    if serve and (tokens or num_gpus or deadline_days):
        raise fail("--tokens, --num-gpus and --deadline-days are for training; --serve sizes by --demand")


def run_job(job, gpu_list, num_gpus, deadline_days, common, *, as_json: bool) -> Comparison | ComparisonSet:
    """Run the comparison `job` (kind, workload) with a progress bar on stderr (none under --json)."""
    with progress_bar("searching layouts", hidden=as_json) as progress:
        if job[0] == "default":
            result: Comparison | ComparisonSet = compare_default(gpu_list, progress=progress, **common)
        elif job[0] == "serving":
            result = compare_serving(job[1], gpu_list, progress=progress, **common)
        else:
            result = compare_training(
                job[1],
                gpu_list,
                num_gpus=num_gpus or None,
                deadline_days=deadline_days or None,
                progress=progress,
                **common,
            )
    return result


def compare(
    model: str = typer.Option("", "--model", "-m", help="catalog model; empty: the embedded default"),
    tokens: str = typer.Option("", help="training tokens (15.6T, 300B, 2e12)"),
    num_gpus: int = typer.Option(0, "--num-gpus", "-n", help="fixed GPU count for every GPU type"),
    deadline_days: float = typer.Option(0.0, "--deadline-days", help="fewest GPUs that finish in time"),
    seq_len: int = typer.Option(TRAINING.seq_len, "--seq-len", help="tokens per sequence (training)"),
    global_batch: int = typer.Option(
        TRAINING.global_batch, "--global-batch", help="sequences per step (training)"
    ),
    serve: bool = typer.Option(False, "--serve", help="compare a serving load instead of training"),
    input_len: int = typer.Option(1024, "--input-len", help="prompt tokens per request (serving)"),
    output_len: int = typer.Option(1024, "--output-len", help="output tokens per request (serving)"),
    demand: float = typer.Option(100000.0, "--demand", help="aggregate output tok/s to carry (serving)"),
    per_user: float = typer.Option(20.0, "--per-user", help="minimum output tok/s per user (serving)"),
    ttft_s: float = typer.Option(5.0, "--ttft-s", help="maximum time to first token, s (serving)"),
    days: float = typer.Option(30.0, "--days", help="days of serving to cost (serving)"),
    gpus: str = typer.Option(",".join(DEFAULT_GPUS), "--gpus", "-g", help="comma-separated catalog GPUs"),
    precisions: str = typer.Option(
        "",
        help="restrict precisions (fp8 or fp8,nvfp4); default bf16/fp8 Hopper, fp8/mxfp8/nvfp4 Blackwell",
    ),
    baseline: str = typer.Option("", help="GPU the ratios refer to (default h100-sxm)"),
    rent_basis: str = typer.Option("reserved", "--rent-basis", help="reserved | ondemand"),
    grid: str = typer.Option("us", help="carbon: us, world, france, germany, ... or g CO2/kWh"),
    own: list[str] = OWN_OPTION,
    price: list[str] = PRICE_OPTION,
    tornado: bool = typer.Option(False, "--tornado", help="also print each GPU's cost sensitivity"),
    report: Path | None = REPORT_OPTION,
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of tables"),
    export: str = typer.Option(
        "",
        "--export",
        help="print each GPU's chosen training plan as launch arguments: megatron|nemo|torchtitan",
    ),
    headroom: float | None = typer.Option(
        None,
        "--headroom",
        help="GiB per GPU each plan leaves outside the model (default: what the framework needs)",
    ),
    calibration: str = typer.Option(
        "",
        "--calibration",
        help=CALIBRATION_HELP + "; with --serve, one written by `tenfold calibrate inference`",
    ),
) -> None:
    """Compare GPUs on one workload: GPUs, days, MFU, GPU-hours, rent and own cost, MWh, tCO2, ratios.

    With no workload it runs the embedded default: the article's GPT-MoE-1.8T (13T tokens, 8,192 GPUs) and
    Llama 3.1 405B (15.6T tokens, 16,384 GPUs) on h100-sxm, h200, b200, gb200, gb300.

    Examples: tenfold compare;  tenfold compare -m llama3-70b --tokens 15T --deadline-days 30;
    tenfold compare -m llama3-70b --serve --per-user 50 --demand 1e6 --gpus h100-sxm,b200

    Exit codes: 0 ok, 1 no GPU has a plan, 2 bad input.
    """
    console = Console()
    check_inputs(report, num_gpus, deadline_days, seq_len, global_batch, serve=serve, tokens=tokens)
    check_training_only(export=export, serve=serve, headroom=headroom, model=model)
    cal = user_calibration(calibration, kind="inference" if serve else "training")
    try:
        settings = CostSettings(
            rent_basis=rent_basis,
            grid=grid,
            own=parse_pairs(own, "--own"),
            per_gpu=parse_prices(price),
        )
        gpu_list = [g.strip() for g in gpus.split(",") if g.strip()]
        settings.check_gpus(gpu_list)
        prec = tuple(p.strip() for p in precisions.split(",") if p.strip()) or None
        common = dict(precisions=prec, baseline=baseline or None, settings=settings)
        common |= {"calibration": cal} if cal is not None else {}
        if not model:
            if tokens or num_gpus or deadline_days or serve:
                raise ValueError("--tokens, --num-gpus, --deadline-days and --serve need --model")
            job = ("default", None)
        elif serve:
            w = ServingWorkload(
                model=model,
                input_len=input_len,
                output_len=output_len,
                output_tokens_per_s=demand,
                min_tokens_per_s_per_user=per_user,
                max_ttft_s=ttft_s,
                days=days,
            )
            job = ("serving", w)
        else:
            if not tokens:
                raise ValueError("training needs --tokens (e.g. --tokens 15T)")
            if bool(num_gpus) == bool(deadline_days):
                raise ValueError("give exactly one of --num-gpus or --deadline-days")
            w = TrainingWorkload(
                model=model,
                tokens=parse_count(tokens),
                seq_len=seq_len,
                global_batch=global_batch,
                headroom_GiB=headroom,
            )
            job = ("training", w)
        result = run_job(job, gpu_list, num_gpus, deadline_days, common, as_json=as_json)
    except ValueError as exc:
        raise fail(str(exc)) from exc
    except Infeasible as exc:  # the serving search found nothing that runs
        raise fail(f"infeasible: {exc}", EXIT_INFEASIBLE) from exc
    write_report(result, report)
    comps = result.comparisons if isinstance(result, ComparisonSet) else (result,)
    exports = plan_exports(comps, export) if export else []
    if as_json:
        print_json(result.to_dict() | ({"export": exports} if export else {}))
    for c in comps if not as_json else ():
        print_comparison(c, console, tornado=tornado)
    for e in exports if not as_json else ():
        console.print(f"\n# {e['workload']}: {e['gpu']} ({e['framework']})", style="bold", markup=False)
        console.print(e["text"] or f"# cannot express this plan: {e['reason']}", markup=False)
    if report is not None and not as_json:
        console.print(f"report written to {report}")
    if not result.feasible:
        raise typer.Exit(EXIT_INFEASIBLE)


def check_training_only(*, export: str, serve: bool, headroom: float | None, model: str) -> None:
    """Exit 2 for options that only a training comparison takes, given with --serve (or without a model)."""
    if export and export not in FRAMEWORKS:
        raise fail(f"--export: unknown framework {export!r}; choose one of {', '.join(FRAMEWORKS)}")
    if export and serve:
        raise fail("--export prints training plans; it does not apply with --serve")
    if headroom is not None and (serve or not model):
        raise fail("--headroom applies to a training comparison of one --model")


def write_report(result, path) -> None:
    """Write the HTML report of a comparison when `--report` names a file (plotly is imported only then)."""
    if path is not None:
        from tenfold.report.compare import write_comparison_report

        write_comparison_report(result, path)
