"""Tables fit 80 columns and never cut a number (issue 14): run with COLUMNS=80, every line <= 80
characters, no ellipsis."""

import pytest
from typer.testing import CliRunner

from tenfold.cli.main import app

runner = CliRunner()

COMMANDS = [
    ["estimate", "infer", "-m", "llama3-70b", "-g", "b200", "--input-len", "1024", "--output-len", "1024"],
    ["estimate", "train", "-m", "llama3-70b", "-g", "h100-sxm", "--tp", "4", "--pp", "4", "--dp", "4"],
    ["compare", "-m", "llama3-70b", "--tokens", "15T", "-n", "256", "--gpus", "h100-sxm,b200"],
    ["search", "train", "-m", "llama3-8b", "-g", "h100-sxm", "-n", "16", "--top", "2"],
    ["validate", "training"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_fits_80_columns(args):
    r = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert r.exit_code in (0, 1), r.output
    wide = [line for line in r.output.splitlines() if len(line) > 80]
    assert not wide, "\n".join(wide)
    assert "…" not in r.output, r.output


def test_validation_table_keeps_run_ids_readable_at_80_columns():
    """The per-row validation table used to squeeze its two text columns to 3 characters at 80 columns (a
    row's id folded over a dozen lines); its one text column now keeps at least 16 characters."""
    r = runner.invoke(app, ["validate", "training"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "nara21-gpt-1p7b-" in r.output  # the first 16 characters of a shipped id, on one line
