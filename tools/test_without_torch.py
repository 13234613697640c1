"""Run the planning tests with torch made unimportable: they must pass on a machine without torch.

From the project root: ``.venv/bin/python tools/test_without_torch.py`` (default: tests/perf, tests/cost,
tests/report and the web's no-torch test; other pytest arguments may follow). ``import torch`` raises
ImportError for the whole run, so a planning module or a test (conftest included) that imports torch fails.
"""

from __future__ import annotations

import sys

PLANNING_TESTS = ["tests/perf", "tests/cost", "tests/report", "tests/web/test_no_torch.py"]


def main(argv: list[str]) -> int:
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` now raises ImportError
    import pytest

    return int(pytest.main(["-q", "-p", "no:cacheprovider", "-m", "not slow", *(argv or PLANNING_TESTS)]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
