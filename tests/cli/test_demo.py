"""`tenfold demo`: the numerics table, as text and as JSON."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tenfold.cli.main import app
from tenfold.formats import SCHEME_NAMES

runner = CliRunner()


def test_demo_json_lists_every_scheme_with_plausible_errors():
    result = runner.invoke(app, ["demo", "--rows", "64", "--cols", "256", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    names = [r["scheme"].split()[0] for r in data["results"]]
    assert set(SCHEME_NAMES) <= set(names)
    by = {r["scheme"]: r for r in data["results"]}
    # more bits, less error: MXFP8 beats NVFP4 beats MXFP4 on a weight-like tensor
    assert by["mxfp8_e4m3 scale_mode=rceil"]["sqnr_db"] > by["nvfp4"]["sqnr_db"] > by["mxfp4"]["sqnr_db"]
    assert by["nvfp4"]["bits_per_element"] == round(4.5 + 32 / (64 * 256), 3)


def test_demo_table_and_bad_input():
    result = runner.invoke(app, ["demo", "--rows", "32", "--cols", "64"])
    assert result.exit_code == 0 and "nvfp4" in result.output
    bad = runner.invoke(app, ["demo", "--rows", "0"])
    assert bad.exit_code == 2
