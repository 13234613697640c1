"""A comparison's title is printed whole at 80 columns, even when its table is wider than the console."""

from rich.console import Console

from tenfold.cli.compare import print_comparison
from tenfold.cost.compare import compare_training
from tenfold.cost.workloads import TrainingWorkload

LABEL = "Llama 3 8B pre-training on a very long label that pushes the title"


def test_long_titles_wrap_whole_at_80_columns():
    w = TrainingWorkload(model="llama3-8b", tokens=15.6e12, global_batch=2048, label=LABEL)
    c = compare_training(w, ["h100-sxm", "b200"], num_gpus=16384, precisions=("fp8",))
    console = Console(width=80, record=True)
    print_comparison(c, console)
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines()), text
    words = " ".join(text.split())
    assert f"{LABEL}: 15.6T tokens, 16,384 GPUs; global batch 2,048 x 8,192 tokens" in words, text
