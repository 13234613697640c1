"""The planning half must import without torch (design.md: perf/ never imports torch)."""

import subprocess
import sys

CODE = (
    "import sys\n"
    "import tenfold.perf, tenfold.perf.training.search, tenfold.perf.validation.training\n"
    "import tenfold.perf.calibration, tenfold.perf.validation.fit\n"
    "import tenfold.perf.serving.estimate, tenfold.perf.serving.step, tenfold.perf.serving.memory\n"
    "import tenfold.perf.serving.kvcache, tenfold.perf.serving.presets, tenfold.perf.validation.serving\n"
    "import tenfold.cli.estimate, tenfold.cli.search, tenfold.cli.validate, tenfold.cli.main\n"
    "tenfold.perf.estimate_training('llama3-8b', 'h100-sxm', tenfold.perf.Layout(dp=8), seq_len=8192,\n"
    "                               global_batch=64)\n"
    "tenfold.perf.estimate_inference('deepseek-v3', 'b200', tenfold.perf.Deployment(dp=8, ep=8),\n"
    "                                input_len=1024, output_len=1024, precision='nvfp4')\n"
    "tenfold.perf.inference_curve('llama3-8b', 'h100-sxm', input_len=128, output_len=128)\n"
    "tenfold.perf.validate_inference()\n"
    "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
    "print(len(bad))\n"
    "assert not bad, bad\n"
)


def test_perf_and_planning_cli_do_not_import_torch():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"
