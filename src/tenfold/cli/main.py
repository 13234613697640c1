"""The `tenfold` command: registers each command module's function on one Typer app."""

from __future__ import annotations

import typer

from tenfold.cli import (
    calibrate,
    claims,
    compare,
    demo,
    estimate,
    fleet,
    inspect,
    policy,
    ptq,
    report,
    search,
    sensitivity,
    serve,
    train,
    validate,
)

app = typer.Typer(
    name="tenfold",
    help="Blackwell numerics you can run today, and planning you can trust.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help text is plain: [[pool]] and [[job]] stay as written
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"tenfold {version('tenfold')}")
        except PackageNotFoundError:
            typer.echo("tenfold (not installed; run from source)")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """tenfold: Blackwell numerics you can run today, and planning you can trust."""


app.command(name="demo")(demo.demo)
app.command(name="compare")(compare.compare)
app.command(name="claims")(claims.claims)
app.command(name="train")(train.train)
app.command(name="report")(report.report)
app.command(name="serve")(serve.serve)
app.command(name="inspect")(inspect.inspect)
app.command(name="policy")(policy.policy)
app.command(name="ptq")(ptq.ptq)
app.command(name="sensitivity")(sensitivity.sensitivity)
app.add_typer(estimate.app, name="estimate")
app.add_typer(search.app, name="search")
app.add_typer(validate.app, name="validate")
app.add_typer(fleet.app, name="fleet")
app.add_typer(calibrate.app, name="calibrate")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
