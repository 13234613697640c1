"""Post-training quantization of a `tenfold train` run's GPT: what it is calibrated and scored on.

The score is the validation loss (and perplexity) on the run's own validation batches, drawn exactly as
`Trainer.evaluate` draws them (same seed, batch size and sequence length; the first `EVAL_BATCHES`).
A policy is chosen on calibration batches from the training split that no run trains on
(`ByteDataset.calibration_batches`), so choosing and scoring never share text. The calibration output is
the logits, whose relative squared error `tenfold.engine.ptq.sensitivity` measures per layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tenfold.engine.autoprecision.sensitivity import cross_entropy_loss
from tenfold.train.data import ByteDataset, load_corpus
from tenfold.train.trainer import TrainConfig

EVAL_BATCHES = 16  # validation batches scored (the trainer's first 16)
CALIBRATION_BATCHES = 4  # training-split batches the per-layer measurement runs on


@dataclass(frozen=True)
class LMTask:
    """A trained GPT's validation and calibration batches (each a list of (inputs, targets))."""

    config: TrainConfig
    validation: list[tuple[torch.Tensor, torch.Tensor]]
    calibration: list[tuple[torch.Tensor, torch.Tensor]]

    @classmethod
    def from_config(
        cls, config: TrainConfig, eval_batches: int = EVAL_BATCHES, calib_batches: int = CALIBRATION_BATCHES
    ) -> LMTask:
        """The batches of the run `config` describes; ValueError when its data file is gone."""
        if config.data is not None and not Path(config.data).is_file():
            raise ValueError(f"the run trained on {config.data}, which is not there any more")
        data = ByteDataset.from_bytes(load_corpus(config.data, config.max_corpus_bytes))
        b, s, seed = config.batch_size, config.gpt_config().seq_len, config.seed
        val = [data.batch("val", i, b, s, seed) for i in range(eval_batches)]
        return cls(config, val, data.calibration_batches(calib_batches, b, s, seed))

    @torch.no_grad()
    def calibration_outputs(self, model: nn.Module) -> torch.Tensor:
        """fp32 logits of every calibration batch, stacked."""
        model.eval()
        return torch.stack([model(x).float() for x, _ in self.calibration])

    @torch.no_grad()
    def loss(self, model: nn.Module) -> float:
        """Mean next-token cross-entropy (nats) over the validation batches."""
        model.eval()
        return sum(cross_entropy_loss(model(x), y).item() for x, y in self.validation) / len(self.validation)

    def score(self, reference: nn.Module, quantized: nn.Module) -> dict[str, Any]:
        """Validation loss and perplexity of both models, and how many tokens they were measured on."""
        before, after = self.loss(reference), self.loss(quantized)
        return {
            "validation": {
                "loss_before": before,
                "loss_after": after,
                "loss_increase": after - before,
                "perplexity_before": math.exp(before),
                "perplexity_after": math.exp(after),
                "batches": len(self.validation),
                "tokens": sum(y.numel() for _, y in self.validation),
            },
            "calibration_batches": len(self.calibration),
        }
