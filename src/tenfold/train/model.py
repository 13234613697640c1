"""A small GPT for recipe experiments: pre-norm blocks, RMSNorm, rotary positions, SwiGLU MLP.

Layout follows Llama (Touvron et al. 2023, arXiv 2302.13971): x += attn(rms(x)); x += mlp(rms(x)),
with RoPE (Su et al. 2021, arXiv 2104.09864) on queries and keys and SwiGLU (Shazeer 2020, arXiv
2002.05202) in the MLP. The linears that `convert()` quantizes are `blocks.{i}.attn.qkv`,
`blocks.{i}.attn.proj`, `blocks.{i}.mlp.fc1` (gate and up, fused) and `blocks.{i}.mlp.fc2`; embeddings,
norms, attention softmax and the `lm_head` stay in high precision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True, kw_only=True)
class GPTConfig:
    """Model shape.

    Fields:
        vocab_size: token vocabulary (256 for bytes).
        n_layers: transformer blocks.
        d_model: residual width.
        n_heads: attention heads (d_model must divide evenly).
        d_ff: SwiGLU hidden width.
        seq_len: longest sequence (rotary tables are built for it).
        rope_base: RoPE frequency base.
    """

    vocab_size: int = 256
    n_layers: int = 4
    d_model: int = 256
    n_heads: int = 4
    d_ff: int = 768
    seq_len: int = 256
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        for f in ("vocab_size", "n_layers", "d_model", "n_heads", "d_ff", "seq_len"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f} must be >= 1, got {getattr(self, f)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if (self.d_model // self.n_heads) % 2:
            raise ValueError(f"head dim {self.d_model // self.n_heads} must be even for rotary embeddings")

    @property
    def n_params(self) -> int:
        d, f, v = self.d_model, self.d_ff, self.vocab_size
        per_block = 3 * d * d + d * d + 2 * d * f + f * d + 2 * d
        return v * d + self.n_layers * per_block + d + d * v


MODEL_SIZES: dict[str, GPTConfig] = {
    "tiny": GPTConfig(n_layers=2, d_model=64, n_heads=2, d_ff=192, seq_len=64),
    "small": GPTConfig(n_layers=4, d_model=256, n_heads=4, d_ff=768, seq_len=256),
    "base": GPTConfig(n_layers=8, d_model=512, n_heads=8, d_ff=1536, seq_len=512),
}


def rope_tables(seq_len: int, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    ang = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv)
    return torch.cos(ang), torch.sin(ang)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (even, odd) of the last dim of x (B, H, S, Dh) by the position angles."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    c, s = cos[: x.shape[-2]], sin[: x.shape[-2]]
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class SwiGLU(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, 2 * cfg.d_ff, bias=False)
        self.fc2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.norm1 = RMSNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.norm2 = RMSNorm(cfg.d_model)
        self.mlp = SwiGLU(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cos, sin)
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """Decoder-only transformer over `cfg.vocab_size` tokens; forward returns logits (B, S, V)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg.seq_len, cfg.d_model // cfg.n_heads, cfg.rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self._init_weights()

    def _init_weights(self) -> None:
        """GPT-2 style: N(0, 0.02), residual output projections scaled by 1/sqrt(2 n_layers)."""
        for name, p in self.named_parameters():
            if p.ndim == 2:
                std = 0.02
                if name.endswith(("attn.proj.weight", "mlp.fc2.weight")):
                    std /= math.sqrt(2 * self.cfg.n_layers)
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        if idx.shape[1] > self.cfg.seq_len:
            raise ValueError(f"sequence of {idx.shape[1]} tokens exceeds seq_len={self.cfg.seq_len}")
        x = self.embed(idx)
        for blk in self.blocks:
            x = blk(x, self.rope_cos, self.rope_sin)
        return self.lm_head(self.norm(x))
