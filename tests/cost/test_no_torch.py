"""tenfold.cost, its commands and its HTML report must import and run without torch (design.md)."""

import subprocess
import sys

CODE = (
    "import sys\n"
    "import tenfold.cost, tenfold.cost.compare, tenfold.cost.compare_serving, tenfold.cost.claims.nvidia\n"
    "import tenfold.cost.fleet, tenfold.cost.tornado, tenfold.cost.claims.speedups, tenfold.report.compare\n"
    "import tenfold.cli.compare, tenfold.cli.claims, tenfold.cli.fleet, tenfold.cli.main\n"
    "from tenfold.cost.compare import compare_training\n"
    "from tenfold.cost.workloads import TrainingWorkload\n"
    "c = compare_training(TrainingWorkload(model='llama3-8b', tokens=1e12, global_batch=256), ['h100-sxm'],\n"
    "                     num_gpus=64)\n"
    "tenfold.report.compare.comparison_report_html(c)\n"
    "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
    "print(len(bad))\n"
    "assert not bad, bad\n"
)


def test_cost_and_its_commands_do_not_import_torch():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"
