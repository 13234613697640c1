"""The web app, the reports and their commands import and run without torch (design.md): the server
answers a comparison and a run folder becomes a report with no torch in sys.modules."""

import subprocess
import sys

CODE = (
    "import json, sys, tempfile, pathlib\n"
    "import tenfold.web, tenfold.report, tenfold.report.compare, tenfold.report.runs\n"
    "import tenfold.cli.report, tenfold.cli.serve, tenfold.cli.main\n"
    "from fastapi.testclient import TestClient\n"
    "c = TestClient(tenfold.web.create_app())\n"
    "r = c.post('/api/compare', json={'kind': 'serving', 'model': 'llama3-8b', 'gpus': ['b200']})\n"
    "assert r.status_code == 200, r.text\n"
    "d = pathlib.Path(tempfile.mkdtemp())\n"
    "(d / 'metrics.jsonl').write_text(json.dumps({'step': 1, 'loss': 2.0}) + '\\n')\n"
    "tenfold.report.runs.runs_report_html(tenfold.report.runs.load_runs(d))\n"
    "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
    "print(len(bad))\n"
    "assert not bad, bad\n"
)


def test_web_and_report_do_not_import_torch():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0"
