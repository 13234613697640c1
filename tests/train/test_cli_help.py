"""`tenfold train --help` names every registered recipe and model size (the CLI lists them itself so that
`tenfold` starts without importing torch)."""

from __future__ import annotations

from tenfold.cli import train as train_cli
from tenfold.engine import RECIPE_NAMES
from tenfold.train import MODEL_SIZES


def test_help_text_lists_the_registries():
    assert "recipe: " + ", ".join(RECIPE_NAMES) == train_cli.RECIPE_HELP
    assert "model size: " + ", ".join(MODEL_SIZES) == train_cli.SIZE_HELP
