"""The reference trainer: a small GPT (pre-norm, RMSNorm, RoPE, SwiGLU) trained byte-level under a
low-precision recipe, on a text file or on an embedded corpus (the Python standard library's source)."""

from tenfold.train.data import ByteDataset, load_corpus, stdlib_corpus
from tenfold.train.model import GPT, MODEL_SIZES, GPTConfig
from tenfold.train.trainer import TrainConfig, Trainer, TrainResult, load_trained, write_metrics

__all__ = [
    "GPT",
    "MODEL_SIZES",
    "ByteDataset",
    "GPTConfig",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "load_corpus",
    "load_trained",
    "stdlib_corpus",
    "write_metrics",
]
