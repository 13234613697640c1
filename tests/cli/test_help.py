"""CLI polish (issue 14): --version, help text kept as written (no markup eaten), no `<bool>` metavar."""

from typer.testing import CliRunner

from tenfold.cli.main import app

runner = CliRunner()


def test_version():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.startswith("tenfold"), r.output


def test_help_keeps_brackets_and_shows_no_bool_metavar():
    r = runner.invoke(app, ["fleet", "plan", "--help"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "[[pool]]" in r.output and "[[job]]" in r.output, r.output
    for cmd in (["compare"], ["search", "train"], ["estimate", "infer"], ["validate", "training"]):
        out = runner.invoke(app, [*cmd, "--help"], env={"COLUMNS": "80"}).output
        assert "<bool>" not in out, (cmd, out)
