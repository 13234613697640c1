"""KV-cache size: bytes per token and per sequence for MHA, GQA, MLA and sliding-window layers.

Formulas:
* MHA / GQA: every layer stores a key and a value vector per KV head, KVB = 2·L·H_kv·d_h·b_kv per token
  (Llama 3.x 70B in BF16: 2·80·8·128·2 = 327,680 B; Llama 3.1 405B: 2·126·8·128·2 = 516,096 B; layers,
  KV heads and head size from "The Llama 3 Herd of Models", arXiv 2407.21783, Table 3).
* MLA (DeepSeek-V2/V3, arXiv 2405.04434 §2.1): the cache holds the compressed latent and the decoupled RoPE
  key, shared by all heads: KVB = L·(kv_lora_rank + qk_rope_head_dim)·b_kv (DeepSeek-V3 in BF16:
  61·(512 + 64)·2 = 70,272 B; its sizes from the DeepSeek-V3 technical report, arXiv 2412.19437 §4.2).
* Sliding-window layers keep only the last `window` tokens, so a sequence of S tokens stores
  min(S, window) of them there (gpt-oss alternates 128-token windows with full attention). That is what
  the attention kernels read; what an engine reserves for them depends on its KV manager
  (presets.Engine.window_kv): TensorRT-LLM allocates window layers' blocks like full-attention ones.

Under tensor parallelism the KV heads are split across the TP ranks; a rank holds at least one head, so
with TP > H_kv the heads are replicated (TensorRT-LLM's `max(tp, num_kv_heads)` rule in trtllm-bench's
tuning.py), and MLA's single latent is replicated on every rank (the reason for attention data
parallelism; TensorRT-LLM tech blog 3, "Optimizing DeepSeek R1 Throughput on NVIDIA Blackwell GPUs",
https://github.com/NVIDIA/TensorRT-LLM/tree/main/docs/source/blogs/tech_blog).
`b_kv` is the KV format's bytes per element from precision.py: bf16/fp16 2, fp8 1, nvfp4 0.5625 (4.5 bits
with its E4M3 block scales).
"""

from __future__ import annotations

import numpy as np

from tenfold.perf.specs.models import ModelSpec
from tenfold.perf.specs.precision import get_precision

KV_PRECISIONS = ("bf16", "fp16", "fp8", "nvfp4")


def kv_element_bytes(kv_precision: str) -> float:
    """Bytes per cached key/value element, scales included."""
    if kv_precision not in KV_PRECISIONS:
        raise ValueError(f"KV-cache precision {kv_precision!r} not in {KV_PRECISIONS}")
    return get_precision(kv_precision).operand_bytes


def kv_heads_per_rank(model: ModelSpec, tp: int) -> float:
    """KV heads one attention TP rank stores (MLA: its one latent 'head'); at least one."""
    if model.is_mla:
        return 1.0
    return max(model.kv_heads / tp, 1.0)


def kv_bytes_per_token_layer(model: ModelSpec, kv_precision: str, *, tp: int = 1) -> float:
    """Bytes one token adds to one layer's cache on one attention TP rank."""
    b = kv_element_bytes(kv_precision)
    if model.is_mla:
        return (model.kv_lora_rank + model.qk_rope_head_dim) * b
    return 2.0 * kv_heads_per_rank(model, tp) * model.head_dim * b


def kv_bytes_per_token(model: ModelSpec, kv_precision: str = "bf16", *, tp: int = 1) -> float:
    """KV-cache bytes per token over all layers on one attention TP rank, ignoring sliding windows
    (the per-token figure model cards quote; see `kv_bytes_per_sequence` for windowed layers)."""
    return model.layers * kv_bytes_per_token_layer(model, kv_precision, tp=tp)


def window_layers(model: ModelSpec) -> int:
    """How many layers use sliding-window attention."""
    if not model.sliding_window:
        return 0
    return round(model.layers * model.window_layer_fraction)


def stored_tokens(model: ModelSpec, seq_len):
    """Token slots a sequence of `seq_len` tokens occupies summed over layers (sliding-window layers keep at
    most the window). Works elementwise on numpy arrays."""
    s = np.asarray(seq_len, dtype=float)
    w = window_layers(model)
    full = model.layers - w
    local = np.minimum(s, model.sliding_window) if w else 0.0
    return full * s + w * local


def kv_bytes_per_sequence(
    model: ModelSpec, kv_precision: str, seq_len, *, tp: int = 1, windows_kept: bool = True
):
    """KV-cache bytes of one sequence of `seq_len` tokens on one attention TP rank. `windows_kept=False`
    sizes sliding-window layers like full-attention ones, as an engine that allocates their blocks
    linearly reserves them (presets.Engine.window_kv)."""
    tokens = stored_tokens(model, seq_len) if windows_kept else model.layers * np.asarray(seq_len, float)
    return tokens * kv_bytes_per_token_layer(model, kv_precision, tp=tp)
