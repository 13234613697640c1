"""The planning defaults in one place: what a training question assumes when the user does not say.

Every command, the web API and the comparison read these; every output that depends on them states them
(global batch, sequence length, precision), because each changes the answer.

* Sequence length 8,192 and a global batch of 2,048 sequences (16.8M tokens per step): the final
  pre-training batch of Llama 3 405B ("The Llama 3 Herd of Models", arXiv 2407.21783, section 3.4.1: 16M
  tokens per batch of 8,192-token sequences), a large dense run that the validation data also covers.
* BF16: the precision every GPU in the catalog supports; lower precisions are asked for by name.
* Megatron-Core with at most 8 virtual pipeline stages: the stack the shipped calibration was fitted on.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class TrainingDefaults:
    """Defaults of a training question (estimate, search, comparison)."""

    seq_len: int = 8192
    """Tokens per sequence."""
    global_batch: int = 2048
    """Sequences per optimizer step."""
    precision: str = "bf16"
    """Number format of the transformer blocks' GEMMs."""
    software: str = "megatron-core"
    """Software-stack preset (`tenfold.perf.training.stack`)."""
    max_vp: int = 8
    """Largest number of virtual pipeline stages the search tries."""

    def __post_init__(self) -> None:
        for name in ("seq_len", "global_batch", "max_vp"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    def describe(self) -> str:
        """One line for a table title or a note: the assumptions that change the answer."""
        return f"global batch {self.global_batch:,} x {self.seq_len:,} tokens, {self.precision}"


TRAINING = TrainingDefaults()

# ---- work bounds: the most one question may ask for, shared by the CLI and the web API ---------------------
MAX_GPUS = 65_536
"""Cluster size in one estimate, search, comparison or fleet pool (the largest published runs are ~32k GPUs;
the Llama 3 paper's 16,384 H100s, arXiv 2407.21783, section 3.3)."""
MAX_SEARCH_PLANS = 4_000_000
"""Layouts one search may enumerate (~4 s on one core)."""
MAX_COMPARE_PLANS = 12_000_000
"""Layouts one training comparison may search, all GPUs together (~12 s)."""
MAX_COMPARE_GPUS = 6
"""GPU types in one comparison (web API)."""
MAX_DEADLINE_GPUS = 4_096
"""Largest count a deadline comparison of the web API tries."""
MAX_VP = 64
"""Virtual pipeline stages per rank (each holds at least one layer; no catalog model has more layers per
pipeline rank)."""
MAX_SEQ = 1 << 20
"""Tokens per sequence."""
MAX_BATCH = 1 << 20
"""Sequences per optimizer step."""
