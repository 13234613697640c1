"""Every planning command x bad inputs (issue 14): exit 2, a message naming the input, no traceback, nothing
written. Each case is rejected before any model runs; the timings are printed (`pytest -s`), not asserted."""

import json
import time

import pytest
from typer.testing import CliRunner

from tenfold.cli.main import app

runner = CliRunner()
TRAIN = ["-m", "llama3-70b", "-g", "h100-sxm"]
INFER = ["estimate", "infer", "-m", "llama3-70b", "-g", "b200", "--input-len", "1024", "--output-len", "1024"]


def cases(tmp):
    """(command line, text the error must contain) pairs; `tmp` is an empty folder."""
    header_only = tmp / "header.csv"
    header_only.write_text("id,model,gpu,num_gpus,tp,pp,metric,value,seq_len,layers,hidden,heads\n")
    text = tmp / "fleet.txt"
    text.write_text("not toml [[[\n")
    huge_pool = tmp / "pool.toml"
    huge_pool.write_text(
        '[[pool]]\nname = "p"\ngpu = "h100-sxm"\ncount = 1000000000\nbasis = "own"\n'
        '[[job]]\nname = "j"\nkind = "training"\nmodel = "llama3-70b"\ntokens = 1e12\ndeadline_days = 30\n'
    )
    return [
        (["compare", "--report", str(tmp)], "--report"),
        (["compare", "--report", str(tmp / "no" / "r.html")], "--report"),
        (["compare", "-m", "llama3-70b", "--tokens", "1T", "-n", "1000000000"], "--num-gpus"),
        (["compare", "-m", "llama3-70b", "--tokens", "15,6T", "-n", "64"], "15,6T"),
        (["compare", "-m", "llama3-70b", "--tokens", "nan", "-n", "64"], "nan"),
        (["compare", "-m", "llama3-70b", "--tokens", "1T", "--deadline-days", "-2"], "--deadline-days"),
        (["compare", "--own", "pue=-1"], "pue"),
        (["compare", "--own", "life_years=0"], "life_years"),
        (["compare", "--own", "utilisation=5"], "utilisation"),
        (["compare", "--price", "b300x:reserved_usd_h=4"], "b300x"),
        (["compare", "--price", "b200:reserved_usd_h=nan"], "reserved_usd_h"),
        (["compare", "--price", "b200:reserved_usd_h=-3"], "reserved_usd_h"),
        (["compare", "-m", "llama3-70b", "--serve", "-n", "8"], "--num-gpus"),
        (
            ["compare", "-m", "llama3-70b", "--tokens", "1T", "-n", "64", "--global-batch", "0"],
            "--global-batch",
        ),
        (["search", "train", *TRAIN, "-n", "64", "--top", "0"], "--top"),
        (["search", "train", *TRAIN, "-n", "64", "--max-vp", "0"], "--max-vp"),
        (["search", "train", *TRAIN, "-n", "1000000000"], "--num-gpus"),
        (["search", "train", *TRAIN, "-n", "64", "--seq-len", "-1"], "--seq-len"),
        (["estimate", "train", *TRAIN, "--dp", "8", "--zero", "-2"], "--zero"),
        (["estimate", "train", *TRAIN, "--dp", "8", "--global-batch", "99999999"], "--global-batch"),
        (["estimate", "train", *TRAIN, "--num-gpus", "1000000000"], "--num-gpus"),
        ([*INFER, "--usd-per-gpu-hour", "nan"], "--usd-per-gpu-hour"),
        ([*INFER, "--usd-per-gpu-hour", "-5"], "--usd-per-gpu-hour"),
        ([*INFER, "--concurrency", "-1"], "--concurrency"),
        (["fleet", "plan", str(tmp)], str(tmp)),
        (["fleet", "plan", str(text)], "fleet.txt"),
        (["fleet", "plan", str(huge_pool)], "count"),
        (["fleet", "plan", str(tmp / "missing.toml")], "missing.toml"),
        (["validate", "training", "--runs", str(tmp)], "--runs"),
        (["validate", "training", "--runs", str(header_only)], "header.csv"),
        (["validate", "inference", "--runs", str(header_only)], "header.csv"),
        (["serve", "--host", "999.1.1.1"], "--host"),
        (["serve", "--port", "70000"], "--port"),
        (["compare", "--export", "deepspeed"], "--export"),
        (["compare", "--headroom", "4"], "--headroom"),
        (["estimate", "train", "-m", "llama3-70b", "-g", "h100-sxn", "--dp", "8"], "did you mean 'h100-sxm'"),
    ]


def test_serve_refuses_a_port_already_taken():
    """uvicorn reported a taken port only after starting (exit 3): the command now checks first."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = runner.invoke(app, ["serve", "--port", str(port)], terminal_width=80)
    assert r.exit_code == 2 and f"--port {port}" in " ".join(r.output.split())


def test_every_bad_input_exits_2_naming_it(tmp_path, capsys):
    timings = []
    for args, named in cases(tmp_path):
        before = sorted(p.name for p in tmp_path.rglob("*"))
        t0 = time.perf_counter()
        r = runner.invoke(app, args, terminal_width=80)
        timings.append((time.perf_counter() - t0, " ".join(args)))
        out = r.output
        assert r.exit_code == 2, (args, r.exit_code, out, r.exception)
        assert "Traceback" not in out, (args, out)
        assert not isinstance(r.exception, Exception) or isinstance(r.exception, SystemExit), (
            args,
            r.exception,
        )
        assert named.lower() in " ".join(out.lower().split()), (args, named, out)
        assert sorted(p.name for p in tmp_path.rglob("*")) == before, (args, "wrote a file")
    with capsys.disabled():
        for t, line in sorted(timings, reverse=True):
            print(f"{t * 1e3:7.1f} ms  {line}")


@pytest.mark.parametrize("text", ["15K", "2.5M"])
def test_small_token_counts_read_well_in_the_title(text):
    r = runner.invoke(
        app, ["compare", "-m", "llama3-70b", "--tokens", text, "-n", "64", "--gpus", "h100-sxm", "--json"]
    )
    assert r.exit_code == 0, r.output
    title = json.loads(r.output)["title"]
    assert f"{text} tokens" in title and "e-0" not in title
    assert "global batch 2,048 x 8,192 tokens" in title  # the assumptions that change the answer
