"""Hugging Face decoder models built from a configuration alone (no weights are read), wrapped so the
reference trainer can train them in place of its GPT.

`llama(...)` gives a Llama-architecture model (RMSNorm, SwiGLU MLP, rotary attention; `LlamaConfig` in
transformers) shaped like the reference GPT but as deep as asked. Its blocks are ``lm.model.layers.N``,
which `tenfold.engine.convert`'s default block pattern finds, so a recipe's high-precision tail counts its
blocks, and its LM head (``lm.lm_head``) is kept in high precision as in the GPT. transformers is the
optional ``hf`` extra; it is imported only when a model is built.
"""

from __future__ import annotations

import torch
from torch import nn


class CausalLM(nn.Module):
    """A Hugging Face causal LM whose forward maps token ids (B, S) to logits (B, S, V), as `GPT` does."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=x, use_cache=False).logits


def llama(
    *, n_layers: int, d_model: int, n_heads: int, d_ff: int, seq_len: int, vocab_size: int = 256
) -> CausalLM:
    """A freshly initialised (from the current torch seed) Llama model of this shape, in fp32."""
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as err:
        raise ImportError("Hugging Face models need transformers: pip install 'tenfold[hf]'") from err
    if d_model % n_heads:
        raise ValueError(f"d_model {d_model} is not a multiple of n_heads {n_heads}")
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=d_model,
        intermediate_size=d_ff,
        num_hidden_layers=n_layers,
        num_attention_heads=n_heads,
        num_key_value_heads=n_heads,
        max_position_embeddings=seq_len,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    return CausalLM(LlamaForCausalLM(cfg).float())
