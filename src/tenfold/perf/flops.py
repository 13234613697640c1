"""FLOP counts per token and per step, under the three conventions the published numbers use.

A GEMM A[m,k]·B[k,n] costs 2mkn FLOP; training costs 3x the forward pass (backward = dgrad + wgrad).

* ``model`` (NVIDIA Megatron-Bridge "model TFLOP/s"): 6 FLOP per token per matmul weight that
  the token touches (input embedding excluded: a lookup) + causal attention 6·a·(s/2)·(d_qk + d_v) per layer,
  + the multi-token-prediction modules. Checked against the Megatron-Bridge tables: Llama 3.1 405B gives
  2.52e12 FLOP/token vs 827 TF / 328 tok/s = 2.52e12 (derived).
* ``palm`` (PaLM MFU, Chowdhery et al. 2022, https://arxiv.org/abs/2204.02311 Appendix B: 6N + 12·L·H·Q·T
  per token): the same matmul FLOPs with the attention counted over the full s x s scores, no causal
  halving. The Llama 3 paper (https://arxiv.org/abs/2407.21783 §3.3.2) reports its MFU by this
  definition; at 128K tokens it counts 1.4x the ``model`` FLOPs of Llama 3.1 405B.
* ``hardware_incl_recompute`` (Narayanan et al. 2021, https://arxiv.org/abs/2104.04473, Eq. 3): non-causal
  attention (the full s x s score matrix is computed, then masked) and one more forward pass of every layer
  for full activation recomputation: F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) for GPT.
"""

from __future__ import annotations

from tenfold.perf.specs.models import ModelSpec

CONVENTIONS = ("model", "palm", "hardware_incl_recompute")


SECONDS_PER_DAY = 86400.0


def attention_context(model: ModelSpec, seq_len: int, *, causal: bool = True) -> float:
    """Mean number of keys each query attends to, averaged over layers (sliding-window layers see at most
    the window; a causal full layer sees s/2 on average, a non-causal count uses s)."""
    full = seq_len / 2 if causal else float(seq_len)
    if model.sliding_window and model.window_layer_fraction:
        w = min(model.sliding_window, seq_len)
        local = w * (1 - w / (2 * seq_len)) if causal else float(w)
        return model.window_layer_fraction * local + (1 - model.window_layer_fraction) * full
    return full


def layer_matmul_params_active(model: ModelSpec) -> float:
    """Matmul weights a token passes through in all transformer layers (top-k experts only)."""
    attn = model.attention_matmul_params()
    dense = model.n_dense_layers * (attn + model.mlp_matmul_params(model.ffn))
    moe = model.moe_layers * (
        attn
        + model.hidden * model.experts  # router
        + (model.shared_experts + model.topk) * model.mlp_matmul_params(model.moe_ffn)
    )
    return float(dense + moe)


def attention_fwd_flops_per_token(model: ModelSpec, seq_len: int, *, causal: bool = True) -> float:
    """QK^T and PV of all layers for one token's query: 2·a·ctx·(d_qk + d_v) per layer."""
    ctx = attention_context(model, seq_len, causal=causal)
    return 2.0 * model.heads * ctx * (model.qk_head_dim + model.v_dim) * model.layers


def mtp_fwd_flops_per_token(model: ModelSpec, seq_len: int, *, causal: bool = True) -> float:
    """Forward FLOPs of the MTP modules: one more layer, a 2h x h projection and the shared head each."""
    if not model.mtp_layers:
        return 0.0
    per_layer = layer_matmul_params_active(model) / model.layers
    if model.is_moe and model.dense_layers:
        attn = model.attention_matmul_params()
        per_layer = (
            attn
            + model.hidden * model.experts
            + (model.shared_experts + model.topk) * model.mlp_matmul_params(model.moe_ffn)
        )
    attn = attention_fwd_flops_per_token(model, seq_len, causal=causal) / model.layers
    return model.mtp_layers * (2.0 * (per_layer + 2 * model.hidden**2 + model.vocab * model.hidden) + attn)


def training_flops_per_token(
    model: ModelSpec, seq_len: int, *, convention: str = "model", recompute: str = "full"
) -> float:
    """Training FLOPs per token under `convention` (see module docstring).

    `recompute` only matters for ``hardware_incl_recompute``: "full" adds one forward of every layer,
    "selective" one forward of the attention core, "none" nothing.
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown FLOP convention {convention!r}; known: {', '.join(CONVENTIONS)}")
    causal = convention == "model"
    layers_fwd = 2.0 * layer_matmul_params_active(model)
    attn_fwd = attention_fwd_flops_per_token(model, seq_len, causal=causal)
    head_fwd = 2.0 * model.vocab * model.hidden
    mtp_fwd = mtp_fwd_flops_per_token(model, seq_len, causal=causal)
    total = 3.0 * (layers_fwd + attn_fwd + head_fwd + mtp_fwd)
    if convention == "hardware_incl_recompute":
        if recompute == "full":
            total += layers_fwd + attn_fwd
        elif recompute == "selective":
            total += attn_fwd
        elif recompute != "none":
            raise ValueError(f"unknown recompute {recompute!r}")
    return total


def megatron_eq3_flops(*, batch: int, seq_len: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021 Eq. 3 for a GPT iteration with full recomputation:
    F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))."""
    b, s, l, h, v = batch, seq_len, layers, hidden, vocab
    return 96.0 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))


def time_to_train_days(
    *, tokens: float, params: float, gpus: int, flops_per_gpu: float, recompute: bool = True
) -> float:
    """Narayanan 2021 §5.1 end-to-end estimate ≈ 8·T·P/(n·X) with recomputation (6·T·P/(n·X) without)."""
    factor = 8.0 if recompute else 6.0
    return factor * tokens * params / (gpus * flops_per_gpu) / SECONDS_PER_DAY
