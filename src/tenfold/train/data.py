"""Byte-level training data: a text file, or an embedded corpus that every machine already has.

The default corpus is the Python standard library's own source: the `.py` files under
`sysconfig.get_path("stdlib")` (site-packages excluded), read as bytes in sorted path order and joined
until `max_bytes`. It needs no download and is the same on every machine with the same Python version.

Batches are a pure function of (seed, step): resuming at step n draws exactly the batches an
uninterrupted run would have drawn, with no sampler state to checkpoint.
"""

from __future__ import annotations

import math
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

DEFAULT_MAX_BYTES = 4 * 1024 * 1024
VOCAB_SIZE = 256


def stdlib_files() -> list[Path]:
    """The standard library's .py files in a deterministic order (sorted relative POSIX paths)."""
    root = Path(sysconfig.get_path("stdlib"))
    files = [p for p in root.rglob("*.py") if "site-packages" not in p.relative_to(root).parts]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def stdlib_corpus(max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The embedded default corpus: standard-library source, at most `max_bytes` bytes."""
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
    parts: list[bytes] = []
    size = 0
    for path in stdlib_files():
        try:
            data = path.read_bytes()
        except OSError:
            continue
        parts.append(data)
        size += len(data)
        if size >= max_bytes:
            break
    corpus = b"".join(parts)[:max_bytes]
    if len(corpus) < 1 << 16:
        raise ValueError(
            f"found only {len(corpus)} bytes of standard-library source under "
            f"{sysconfig.get_path('stdlib')}; pass a text file instead"
        )
    return corpus


def load_corpus(path: str | Path | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """Bytes of a text file (whole file), or the embedded stdlib corpus when `path` is None."""
    if path is None:
        return stdlib_corpus(max_bytes)
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"data file {str(p)!r} does not exist")
    return p.read_bytes()


# first calibration batch index: beyond any run's steps, and below 1_000_003 - n so that its generator
# seeds never equal those of the seed's validation batches (see `batch`)
CALIBRATION_INDEX = 500_000


@dataclass(frozen=True, kw_only=True, eq=False)
class ByteDataset:
    """A byte corpus split into train and validation parts (the last `val_fraction` is validation).

    Fields:
        data: the corpus as a uint8 tensor.
        val_fraction: share of the bytes held out for validation.
    """

    data: torch.Tensor
    val_fraction: float = 0.1

    def __post_init__(self) -> None:
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {self.val_fraction}")
        if self.data.dtype != torch.uint8 or self.data.ndim != 1:
            raise ValueError("data must be a 1-D uint8 tensor")

    @classmethod
    def from_bytes(cls, raw: bytes, val_fraction: float = 0.1) -> ByteDataset:
        return cls(data=torch.frombuffer(bytearray(raw), dtype=torch.uint8), val_fraction=val_fraction)

    def check_fits(self, seq_len: int, source: str | None = None) -> None:
        """Raise ValueError naming the data when a split is too short for windows of `seq_len` bytes."""
        need = seq_len + 2
        for split in ("train", "val"):
            if len(self.part(split)) < need:
                what = f"data file {source!r}" if source else "the corpus"
                raise ValueError(
                    f"{what} has {len(self.data)} bytes: too short for seq_len {seq_len} (each of the train "
                    f"and validation splits, {1 - self.val_fraction:.0%} / {self.val_fraction:.0%}, needs "
                    f"{need} bytes; give at least {math.ceil(need / self.val_fraction)} bytes)"
                )

    @property
    def split_at(self) -> int:
        return int(len(self.data) * (1 - self.val_fraction))

    def part(self, split: str) -> torch.Tensor:
        if split == "train":
            return self.data[: self.split_at]
        if split == "val":
            return self.data[self.split_at :]
        raise ValueError(f"split must be train or val, got {split!r}")

    def calibration_batches(
        self, n: int, batch_size: int, seq_len: int, seed: int
    ) -> list[tuple[torch.Tensor, ...]]:
        """`n` training-split batches a run never trains on (indices from CALIBRATION_INDEX on), for
        measurements such as `tenfold.engine.autoprecision.sensitivity` that must leave the validation
        batches alone."""
        return [self.batch("train", CALIBRATION_INDEX + i, batch_size, seq_len, seed) for i in range(n)]

    def batch(
        self, split: str, index: int, batch_size: int, seq_len: int, seed: int
    ) -> tuple[torch.Tensor, ...]:
        """(inputs, targets), each (batch_size, seq_len) int64, for batch `index` of `split`.

        The windows' start positions come from a generator seeded by (seed, split, index) only."""
        part = self.part(split)
        if len(part) < seq_len + 2:
            raise ValueError(
                f"the {split} split has {len(part)} bytes, fewer than seq_len + 2 = {seq_len + 2}"
            )
        salt = 0 if split == "train" else 1
        g = torch.Generator().manual_seed((seed * 2 + salt) * 1_000_003 + index)
        starts = torch.randint(0, len(part) - seq_len - 1, (batch_size,), generator=g)
        idx = starts.unsqueeze(1) + torch.arange(seq_len + 1)
        window = part[idx].to(torch.int64)
        return window[:, :-1].contiguous(), window[:, 1:].contiguous()
