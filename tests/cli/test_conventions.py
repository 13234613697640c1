"""CLI conventions, frozen: the command list is one literal below (update it when a command is added);
every command's --help shows an example and a --json option; exit codes 0 ok / 1 infeasible / 2 bad input
for the commands this issue adds."""

import json

import typer
from typer.testing import CliRunner

from tenfold.cli.main import app

runner = CliRunner()

COMMANDS = [
    "calibrate inference",
    "calibrate training",
    "claims",
    "compare",
    "demo",
    "estimate disagg",
    "estimate infer",
    "estimate train",
    "fleet plan",
    "inspect",
    "policy",
    "ptq",
    "report",
    "search train",
    "sensitivity",
    "serve",
    "train",
    "validate inference",
    "validate training",
]


def leaves(cmd, prefix: str = "") -> list[str]:
    """Full names of the leaf commands under a Typer/click group (typer may vendor its own click)."""
    if getattr(cmd, "commands", None):
        out = []
        for name, sub in cmd.commands.items():
            out.extend(leaves(sub, f"{prefix} {name}".strip()))
        return out
    return [prefix]


def test_command_list_is_frozen():
    assert sorted(leaves(typer.main.get_command(app))) == COMMANDS


def test_every_command_has_help_with_an_example_and_json():
    for name in COMMANDS:
        r = runner.invoke(app, [*name.split(), "--help"], terminal_width=200)
        assert r.exit_code == 0, (name, r.output)
        assert "Example" in r.output, f"`tenfold {name} --help` shows no example"
        assert "--json" in r.output, f"`tenfold {name}` has no --json"


def write_run(folder):
    folder.mkdir()
    rows = [{"step": i, "loss": 3.0 - 0.1 * i} for i in range(1, 11)]
    rows[-1]["val_loss"] = 2.1
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_report_command(tmp_path):
    write_run(tmp_path / "bf16")
    r = runner.invoke(app, ["report", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["runs"] == ["bf16"] and d["charts"][0]["key"] == "loss"
    html = (tmp_path / "report.html").read_text()
    assert html.startswith("<!doctype html>") and "Loss curves per recipe" in html
    assert runner.invoke(app, ["report", str(tmp_path / "nope")]).exit_code == 2
    assert (
        runner.invoke(app, ["report", str(tmp_path / "bf16"), "--out", str(tmp_path / "r.html")]).exit_code
        == 0
    )
    assert (tmp_path / "r.html").exists()


def test_compare_writes_the_rich_report(tmp_path):
    out = tmp_path / "cmp.html"
    args = [
        "compare",
        "-m",
        "llama3-8b",
        "--serve",
        "--gpus",
        "h100-sxm,b200",
        "--report",
        str(out),
        "--json",
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    html = out.read_text()
    for title in (
        "Job cost per GPU type",
        "Energy per GPU type",
        "Throughput vs interactivity",
        "Cost tornado",
    ):
        assert title in html
    assert "TENFOLD_CHARTS" in html and "<script src=" not in html


def test_serve_bad_input():
    assert runner.invoke(app, ["serve", "--port", "0"]).exit_code == 2
    assert runner.invoke(app, ["serve", "--time-limit-s", "-1"]).exit_code == 2


# one semantic bad input per command (not a mistyped option, which click rejects by itself): exit code 2
# and a message that names what is wrong. `claims` takes no input; `serve` is covered above.
BAD_INPUT = {  # command: (arguments, split on spaces; text the message must contain)
    "calibrate inference": ("calibrate inference --runs missing-runs.csv --out c.toml", "missing-runs.csv"),
    "calibrate training": ("calibrate training --runs missing-runs.csv --out c.toml", "missing-runs.csv"),
    "compare": ("compare -m no-such-model --tokens 1T -n 8", "no-such-model"),
    "demo": ("demo --rows 0", "rows"),
    "estimate disagg": (
        "estimate disagg -m llama3-8b -g h100-sxm --input-len 8 --output-len 8 --prefill 0,1,1",
        "--prefill",
    ),
    "estimate infer": ("estimate infer -m llama3-8b -g z80 --input-len 8 --output-len 8", "z80"),
    "estimate train": ("estimate train -m llama3-8b -g h100-sxm --dp 8 --seq-len 0 --global-batch 8", "seq"),
    "fleet plan": ("fleet plan missing-fleet.toml", "missing-fleet.toml"),
    "inspect": ("inspect no-such-run-dir", "no-such-run-dir"),
    "policy": ("policy missing-policy.toml", "missing-policy.toml"),
    "ptq": ("ptq --minilm --scheme fp3 --out ptq-out", "fp3"),
    "report": ("report no-such-run-dir", "no-such-run-dir"),
    "search train": (
        "search train -m llama3-8b -g h100-sxm -n 8 --seq-len 2048 --global-batch 8 --precision fp3",
        "fp3",
    ),
    "sensitivity": ("sensitivity no-such-run-dir", "no-such-run-dir"),
    "train": ("train --recipe fp3", "fp3"),
    "validate inference": ("validate inference --runs missing-runs.csv", "missing-runs.csv"),
    "validate training": ("validate training --runs missing-runs.csv", "missing-runs.csv"),
}


def test_every_command_rejects_bad_input_with_exit_code_2_and_says_why():
    assert set(BAD_INPUT) | {"claims", "serve"} == set(COMMANDS)
    for name, (args, needle) in BAD_INPUT.items():
        r = runner.invoke(app, args.split(), terminal_width=300)
        flat = " ".join(r.output.replace("│", " ").split())
        assert r.exit_code == 2, (name, r.exit_code, flat[-300:])
        assert needle in flat, (name, flat[-300:])
