"""Every numerics command x bad inputs: exit 2, a message naming the input, no traceback, nothing written.

The default suite runs each case in this interpreter (typer's CliRunner). The slow variant runs each in a
fresh one (`python -m tenfold.cli.main`, about 4 s apiece where torch loads), so that the timing printed with
`-s` shows whether the rejection came before torch was imported (no timed assertion: shared CI)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tenfold.cli.main import app

HUGE = "100000000"


def cases(tmp: Path) -> list[tuple[str, list[str], str]]:
    """(id, argv, text the message must contain)."""
    afile, adir, short, three = tmp / "a_file", tmp / "a_dir", tmp / "short.txt", tmp / "three.txt"
    run = tmp / "run"
    return [
        ("train-out-file", ["train", "--out", str(afile)], "--out"),
        ("train-out-unwritable", ["train", "--out", "/proc/tenfold-no"], "--out"),
        ("train-data-dir", ["train", "--data", str(adir), "--out", str(tmp / "o")], "--data"),
        ("train-data-short", ["train", "--data", str(short), "--out", str(tmp / "o")], "too short"),
        ("train-data-missing", ["train", "--data", str(tmp / "nope"), "--out", str(tmp / "o")], "--data"),
        ("train-lr-inf", ["train", "--lr", "inf", "--out", str(tmp / "o")], "--lr"),
        ("train-lr-nan", ["train", "--lr", "nan", "--out", str(tmp / "o")], "--lr"),
        ("train-lr-negative", ["train", "--lr", "-1", "--out", str(tmp / "o")], "--lr"),
        ("train-d-model-huge", ["train", "--d-model", "1048576", "--out", str(tmp / "o")], "GiB"),
        ("train-batch-huge", ["train", "--batch-size", HUGE, "--out", str(tmp / "o")], "GiB"),
        ("train-steps-zero", ["train", "--steps", "0", "--out", str(tmp / "o")], "steps"),
        ("demo-rows-huge", ["demo", "--rows", HUGE, "--cols", HUGE], "--rows"),
        ("demo-rows-zero", ["demo", "--rows", "0"], "rows"),
        ("inspect-heatmap-txt", ["inspect", str(run), "--heatmap", str(tmp / "x.txt")], "--heatmap"),
        ("inspect-heatmap-dir", ["inspect", str(run), "--heatmap", str(tmp / "d.html")], "--heatmap"),
        ("inspect-run-missing", ["inspect", str(tmp / "nope")], "RUN_DIR"),
        ("inspect-top-negative", ["inspect", str(run), "--top", "-1"], "--top"),
        ("sensitivity-fraction", ["sensitivity", str(run), "--fp4-fraction", "1.5"], "--fp4-fraction"),
        ("sensitivity-fraction-nan", ["sensitivity", str(run), "--fp4-fraction", "nan"], "--fp4-fraction"),
        (
            "sensitivity-loss-neg",
            ["sensitivity", str(run), "--max-loss-increase", "-1"],
            "--max-loss-increase",
        ),
        ("sensitivity-run-file", ["sensitivity", str(afile)], "RUN_DIR"),
        ("sensitivity-out-dir", ["sensitivity", str(run), "--policy-out", str(adir)], "--policy-out"),
        ("report-out-dir", ["report", str(run), "--out", str(adir)], "--out"),
        ("policy-dir", ["policy", str(adir)], "PATH"),
        ("ptq-no-model", ["ptq", "--out", str(tmp / "o")], "--minilm"),
        ("ptq-model-and-minilm", ["ptq", str(adir), "--minilm", "--out", str(tmp / "o")], "exactly one"),
        ("ptq-model-missing", ["ptq", str(tmp / "nope"), "--out", str(tmp / "o")], "MODEL_DIR"),
        ("ptq-model-file", ["ptq", str(afile), "--out", str(tmp / "o")], "MODEL_DIR"),
        ("ptq-scheme", ["ptq", "--minilm", "--scheme", "fp3", "--out", str(tmp / "o")], "fp3"),
        ("ptq-policy", ["ptq", "--minilm", "--policy", "best", "--out", str(tmp / "o")], "--policy"),
        ("ptq-bits-uniform", ["ptq", "--minilm", "--bits", "5", "--out", str(tmp / "o")], "--policy auto"),
        (
            "ptq-bits-low",
            ["ptq", "--minilm", "--policy", "auto", "--bits", "3", "--out", str(tmp / "o")],
            "--bits",
        ),
        (
            "ptq-floor-high",
            ["ptq", "--minilm", "--policy", "auto", "--floor", "2", "--out", str(tmp / "o")],
            "--floor",
        ),
        ("ptq-out-not-empty", ["ptq", "--minilm", "--out", str(tmp)], "not empty"),
        ("ptq-out-file", ["ptq", "--minilm", "--out", str(afile)], "--out"),
        (
            "ptq-eval-missing",
            ["ptq", "--minilm", "--eval", str(tmp / "nope.txt"), "--out", str(tmp / "o")],
            "--eval",
        ),
        ("ptq-eval-short", ["ptq", "--minilm", "--eval", str(short), "--out", str(tmp / "o")], "at least 3"),
        (
            "ptq-calib-overlap",
            [
                "ptq",
                "--minilm",
                "--policy",
                "auto",
                "--calib",
                str(three),
                "--eval",
                str(three),
                "--out",
                str(tmp / "o"),
            ],
            "share",
        ),
    ]


IDS = [c[0] for c in cases(Path("/x"))]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    t = tmp_path_factory.mktemp("bad")
    (t / "a_file").write_text("x")
    (t / "a_dir").mkdir()
    (t / "d.html").mkdir()
    (t / "short.txt").write_bytes(b"too short")
    (t / "three.txt").write_text("one sentence\nanother sentence\na third sentence\n")
    (t / "run").mkdir()
    return t


def run_fresh(argv: list[str]) -> tuple[int, str]:
    env = {**os.environ, "COLUMNS": "200"}
    r = subprocess.run(
        [sys.executable, "-m", "tenfold.cli.main", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return r.returncode, r.stdout + r.stderr


def run_here(argv: list[str]) -> tuple[int, str]:
    r = CliRunner().invoke(app, argv, terminal_width=200)
    assert r.exception is None or isinstance(r.exception, SystemExit), (argv, r.exception)
    return r.exit_code, r.output


@pytest.mark.parametrize("fresh", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["here", "fresh"])
@pytest.mark.parametrize("case_id", IDS)
def test_bad_input_exits_2_naming_it(case_id: str, fresh: bool, tmp: Path) -> None:
    _, argv, needle = next(c for c in cases(tmp) if c[0] == case_id)
    before = sorted(p.relative_to(tmp) for p in tmp.rglob("*"))
    t0 = time.perf_counter()
    code, text = (run_fresh if fresh else run_here)(argv)
    took = time.perf_counter() - t0
    out = " ".join(text.replace("│", " ").split())
    print(f"{case_id}: exit {code} in {took:.2f} s")
    assert code == 2, out
    assert needle in out, out
    assert "Traceback" not in out
    assert sorted(p.relative_to(tmp) for p in tmp.rglob("*")) == before  # nothing written
