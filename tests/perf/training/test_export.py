"""Launch arguments for a searched plan (`--export`) and the memory headroom knob."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tenfold.perf import Layout, estimate_training
from tenfold.perf.errors import Infeasible
from tenfold.perf.training.export import export_plan
from tenfold.perf.training.search import search_training


def _est(**kw):
    lay = Layout(tp=8, pp=8, vp=8, dp=8, cp=2, **kw)
    return estimate_training(
        "llama3.1-405b", "h100-sxm", lay, seq_len=8192, global_batch=1536, precision="fp8"
    )


def test_megatron_flags_carry_every_degree():
    text = export_plan(_est(), "megatron", layers=126)
    for flag in (
        "--tensor-model-parallel-size 8",
        "--pipeline-model-parallel-size 8",
        "--num-virtual-stages-per-pipeline-rank 8",
        "--account-for-embedding-in-pipeline-split",
        "--context-parallel-size 2",
        "--micro-batch-size 1",
        "--global-batch-size 1536",
        "--use-distributed-optimizer",
        "--fp8-format hybrid",
    ):
        assert flag in text


def test_nemo_and_torchtitan_say_what_they_cannot_express():
    assert "virtual_pipeline_model_parallel_size = 8" in export_plan(_est(), "nemo", layers=126)
    with pytest.raises(Infeasible, match="126 layers"):
        export_plan(_est(), "torchtitan", layers=126)
    with pytest.raises(ValueError, match="--export"):
        export_plan(_est(), "deepspeed", layers=126)


def test_headroom_is_a_knob():
    kw = dict(seq_len=8192, global_batch=256, top_k=1)
    base = search_training("llama3-70b", "h100-sxm", 64, **kw)
    roomy = search_training("llama3-70b", "h100-sxm", 64, headroom_GiB=40.0, **kw)
    assert roomy.fits < base.fits
    assert roomy.top[0].memory.total_GiB <= 80 and roomy.top[0].memory.other_GiB > 40.0
    with pytest.raises(ValueError, match="headroom"):
        search_training("llama3-70b", "h100-sxm", 64, headroom_GiB=-1.0, **kw)


def test_cli_search_export_json():
    out = subprocess.run(
        [
            *(
                sys.executable,
                "-m",
                "tenfold.cli.main",
                "search",
                "train",
                "-m",
                "llama3-8b",
                "-g",
                "h100-sxm",
            ),
            *("-n", "8", "--seq-len", "4096", "--global-batch", "64", "--export", "torchtitan", "--json"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "[parallelism]" in json.loads(out.stdout)["export"]
