"""compare_serving refuses a GPU count it cannot honour (issue 14: `-n` was ignored under `--serve`)."""

import pytest

from tenfold.cost.compare_serving import compare_serving
from tenfold.cost.workloads import ServingWorkload


def test_a_fixed_gpu_count_is_refused_by_name():
    w = ServingWorkload(
        model="llama3-8b",
        input_len=1024,
        output_len=256,
        output_tokens_per_s=1e5,
        min_tokens_per_s_per_user=20.0,
        max_ttft_s=5.0,
    )
    with pytest.raises(ValueError, match="num_gpus=64"):
        compare_serving(w, ["h100-sxm"], num_gpus=64)
