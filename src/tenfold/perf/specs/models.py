"""Model catalog: transformer architectures and their parameter counts, computed from the shape.

Notation (Korthikanti et al. 2022; JAX scaling book): L layers, h hidden, a query heads, g KV heads, d head
dim, f FFN width, V vocabulary, E routed experts, k experts per token, f_e expert FFN width.

Counted correctly: GQA (K/V projections are h x g·d), gated FFNs (SwiGLU has three h x f matrices, GeLU/ReLU
two), MoE (routed + shared experts + router, with the first `dense_layers` layers dense), MLA (DeepSeek-V2/V3
low-rank Q and KV projections, arXiv 2412.19437 §2.1), biases, norms, learned positions, tied embeddings,
attention sinks. Files: `tenfold/data/models/*.toml`; `[published]` holds the counts the tests compare with.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tenfold.perf.specs.catalog import Sourced, catalog_entries, read_toml, resolve, sourced

ACTIVATIONS = ("swiglu", "geglu", "gelu", "relu", "relu2")
GATED = ("swiglu", "geglu")


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer. Build with `load_model(name)`; `replace()` for variants.

    Fields:
        name, display_name, aliases: identity; aliases match validation rows' `model` column.
        layers, hidden, heads, kv_heads, head_dim, ffn, vocab: L, h, a, g, d, f, V.
        activation: swiglu | geglu (gated, 3 matrices) or gelu | relu | relu2 (2 matrices).
        norm: layernorm (weight + bias) or rmsnorm (weight).
        position: rope or learned (learned adds max_position x h parameters).
        tied_embeddings: output head shares the input embedding matrix.
        linear_bias: every linear layer has a bias (GPT-2/3, Megatron GPT, gpt-oss).
        qk_norm: per-head RMSNorm on queries and keys (Qwen3).
        attention_sinks: one learned logit per head (gpt-oss).
        dropout: dropout probability used in training (Megatron GPT 0.1; modern LLMs 0).
        sliding_window, window_layer_fraction: local attention span and the share of layers using it.
        experts, shared_experts, topk, moe_ffn, dense_layers: MoE shape (experts=0: dense model).
        node_limit: tokens are routed to at most this many scale-up domains (DeepSeek-V3: 4), 0 = none.
        router_bias: the router has a bias (gpt-oss).
        fp8_format: the format of the publisher's FP8 checkpoint, which "fp8" weights mean for this model:
            "fp8" (per-tensor scales, e.g. NVIDIA ModelOpt exports) or "fp8_block" (128 x 128 block scales,
            DeepSeek-V3/R1's own release); `fp8_format_source` in the catalog cites its config.
        q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim: MLA (kv_lora_rank=0:
            not MLA). q_lora_rank=0 means a full-rank query projection.
        mtp_layers: multi-token-prediction modules trained alongside (DeepSeek-V3: 1).
        published_params, published_active: published counts in parameters (0 if none), with sources.
    """

    name: str
    display_name: str = ""
    aliases: tuple[str, ...] = ()
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    activation: str = "swiglu"
    norm: str = "rmsnorm"
    position: str = "rope"
    max_position: int = 0
    tied_embeddings: bool = False
    linear_bias: bool = False
    qk_norm: bool = False
    attention_sinks: bool = False
    dropout: float = 0.0
    sliding_window: int = 0
    window_layer_fraction: float = 0.0
    experts: int = 0
    shared_experts: int = 0
    topk: int = 0
    moe_ffn: int = 0
    dense_layers: int = 0
    node_limit: int = 0
    router_bias: bool = False
    fp8_format: str = "fp8"
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    mtp_layers: int = 0
    published_params: float = 0.0
    published_active: float = 0.0
    sources: dict[str, Sourced] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        for key in ("layers", "hidden", "heads", "kv_heads", "head_dim", "vocab"):
            if getattr(self, key) < 1:
                raise ValueError(f"{self.name}: {key} must be >= 1, got {getattr(self, key)}")
        if self.heads % self.kv_heads:
            raise ValueError(f"{self.name}: kv_heads={self.kv_heads} must divide heads={self.heads}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"{self.name}: activation {self.activation!r} not in {ACTIVATIONS}")
        if self.norm not in ("layernorm", "rmsnorm"):
            raise ValueError(f"{self.name}: norm {self.norm!r} must be layernorm or rmsnorm")
        if self.position not in ("rope", "learned"):
            raise ValueError(f"{self.name}: position {self.position!r} must be rope or learned")
        if self.experts:
            if not 1 <= self.topk <= self.experts:
                raise ValueError(f"{self.name}: topk={self.topk} must be in 1..experts={self.experts}")
            if self.moe_ffn < 1:
                raise ValueError(f"{self.name}: an MoE model needs moe_ffn >= 1, got {self.moe_ffn}")
            if not 0 <= self.dense_layers <= self.layers:
                raise ValueError(f"{self.name}: dense_layers={self.dense_layers} outside 0..{self.layers}")
        elif self.ffn < 1:
            raise ValueError(f"{self.name}: a dense model needs ffn >= 1, got {self.ffn}")
        if not 0.0 <= self.window_layer_fraction <= 1.0:
            raise ValueError(f"{self.name}: window_layer_fraction={self.window_layer_fraction} not in [0, 1]")

    # ---- shape helpers -------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def gated(self) -> bool:
        return self.activation in GATED

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def n_dense_layers(self) -> int:
        return self.dense_layers if self.is_moe else self.layers

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def v_dim(self) -> int:
        return self.v_head_dim if self.is_mla else self.head_dim

    # ---- parameter counts (weights of linear layers = "matmul" parameters, the FLOP-bearing ones) --
    def attention_matmul_params(self) -> int:
        """Q, K, V and output projections of one layer (weights only)."""
        h, a, g, d = self.hidden, self.heads, self.kv_heads, self.head_dim
        if not self.is_mla:
            return h * a * d + 2 * h * g * d + a * d * h
        # MLA (DeepSeek-V3 §2.1.1): W_DQ h x r_q, W_UQ r_q x a(d_n + d_r), W_DKV h x (r_kv + d_r),
        # W_UKV r_kv x a(d_n + d_v), W_O a·d_v x h.
        dn, dr, dv = self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim
        q = (
            h * a * (dn + dr)
            if self.q_lora_rank == 0
            else h * self.q_lora_rank + self.q_lora_rank * a * (dn + dr)
        )
        kv = h * (self.kv_lora_rank + dr) + self.kv_lora_rank * a * (dn + dv)
        return q + kv + a * dv * h

    def attention_other_params(self) -> int:
        """Biases, q/k norms, MLA's low-rank norms and sinks of one layer's attention."""
        a, g, d = self.heads, self.kv_heads, self.head_dim
        n = 0
        if self.linear_bias:
            n += (a + 2 * g) * d + self.hidden
        if self.qk_norm:
            n += 2 * d
        if self.is_mla:
            n += self.kv_lora_rank + self.q_lora_rank
        if self.attention_sinks:
            n += a
        return n

    def mlp_matmul_params(self, width: int) -> int:
        """One FFN of width `width` (an expert or the dense MLP): 3 matrices if gated, else 2."""
        return (3 if self.gated else 2) * self.hidden * width

    def mlp_bias_params(self, width: int) -> int:
        if not self.linear_bias:
            return 0
        return (2 * width if self.gated else width) + self.hidden

    def norm_params(self) -> int:
        return (2 if self.norm == "layernorm" else 1) * self.hidden

    def dense_layer_params(self) -> int:
        return (
            self.attention_matmul_params()
            + self.attention_other_params()
            + self.mlp_matmul_params(self.ffn)
            + self.mlp_bias_params(self.ffn)
            + 2 * self.norm_params()
        )

    def expert_params(self) -> int:
        """One routed expert (weights and biases)."""
        return self.mlp_matmul_params(self.moe_ffn) + self.mlp_bias_params(self.moe_ffn)

    def router_params(self) -> int:
        return self.hidden * self.experts + (self.experts if self.router_bias else 0)

    def moe_layer_params(self, *, active: bool = False) -> int:
        """One MoE layer: attention, norms, router, shared experts, routed experts (top-k if active)."""
        routed = self.topk if active else self.experts
        return (
            self.attention_matmul_params()
            + self.attention_other_params()
            + 2 * self.norm_params()
            + self.router_params()
            + (self.shared_experts + routed) * self.expert_params()
        )

    def embedding_params(self) -> int:
        """Input embedding (plus learned positions)."""
        pos = self.max_position * self.hidden if self.position == "learned" else 0
        return self.vocab * self.hidden + pos

    def head_params(self) -> int:
        """Output projection (0 when tied to the input embedding) plus the final norm."""
        return (0 if self.tied_embeddings else self.vocab * self.hidden) + self.norm_params()

    def total_params(self) -> int:
        """All parameters, excluding multi-token-prediction modules (as papers count them)."""
        layers = self.n_dense_layers * self.dense_layer_params() + self.moe_layers * self.moe_layer_params()
        return layers + self.embedding_params() + self.head_params()

    def active_params(self, *, input_embedding: bool = True) -> int:
        """Parameters touched per token: top-k routed experts only. `input_embedding=False` drops the
        lookup table (gpt-oss's convention); with tied embeddings the matrix still counts once as head."""
        layers = self.n_dense_layers * self.dense_layer_params() + self.moe_layers * self.moe_layer_params(
            active=True
        )
        emb = self.embedding_params() if input_embedding else 0
        head = self.head_params()
        if self.tied_embeddings and not input_embedding:
            head += self.vocab * self.hidden
        return layers + emb + head

    def mtp_params(self) -> int:
        """One MTP module per depth: a transformer layer (MoE if the model is) + a 2h x h projection +
        two norms; embedding and head are shared with the main model (DeepSeek-V3 §2.2)."""
        layer = self.moe_layer_params() if self.is_moe else self.dense_layer_params()
        return self.mtp_layers * (layer + 2 * self.hidden * self.hidden + 2 * self.norm_params())

    def expert_total_params(self) -> int:
        """Routed-expert parameters of the whole model (sharded by expert parallelism)."""
        return self.moe_layers * self.experts * self.expert_params()


_TOP = {
    "name",
    "display_name",
    "aliases",
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "head_dim",
    "ffn",
    "vocab",
    "activation",
    "norm",
    "position",
    "max_position",
    "tied_embeddings",
    "linear_bias",
    "qk_norm",
    "attention_sinks",
    "dropout",
    "sliding_window",
    "window_layer_fraction",
    "mtp_layers",
    "fp8_format",
}
_IGNORED = {"source", "architecture_note", "family", "fp8_format_source"}
_MOE = {
    "experts": "experts",
    "shared_experts": "shared_experts",
    "topk": "topk",
    "ffn": "moe_ffn",
    "dense_layers": "dense_layers",
    "node_limit": "node_limit",
    "router_bias": "router_bias",
}
_MLA = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def model_from_dict(d: dict[str, Any], *, where: str = "<dict>") -> ModelSpec:
    """Build a `ModelSpec` from the TOML layout of tenfold/data/models (see the README there)."""
    kw: dict[str, Any] = {}
    for key, value in d.items():
        if key in _TOP:
            kw[key] = tuple(value) if key == "aliases" else value
        elif key == "moe":
            for k, v in value.items():
                if k not in _MOE:
                    raise ValueError(f"{where}: unknown [moe] key {k!r}")
                kw[_MOE[k]] = v
        elif key == "mla":
            for k, v in value.items():
                if k not in _MLA:
                    raise ValueError(f"{where}: unknown [mla] key {k!r}")
                kw[k] = v
        elif key == "published" or key in _IGNORED:
            continue
        else:
            raise ValueError(f"{where}: unknown key {key!r}")
    srcs: dict[str, Sourced] = {}
    pub = d.get("published", {})
    if "params_b" in pub:
        srcs["params"] = sourced(pub["params_b"], where=f"{where} [published] params_b")
        kw["published_params"] = float(srcs["params"].value) * 1e9
    if "active_params_b" in pub:
        srcs["active_params"] = sourced(pub["active_params_b"], where=f"{where} [published] active_params_b")
        kw["published_active"] = float(srcs["active_params"].value) * 1e9
    if "source" in d:
        srcs["architecture"] = Sourced(
            value=0, source=str(d["source"]), note=str(d.get("architecture_note", ""))
        )
    return ModelSpec(sources=srcs, **kw)


def load_model(name_or_path: str | Path) -> ModelSpec:
    """A catalog model by name (`llama3-70b`), by alias (`Llama-3-70B`), or from a TOML file."""
    key = str(name_or_path)
    for entry_name, path in catalog_entries("models").items():
        if key.lower() == entry_name:
            return model_from_dict(read_toml(path), where=path.name)
    match = find_model(key)
    if match is not None:
        return match
    path = resolve("models", name_or_path)
    return model_from_dict(read_toml(path), where=str(getattr(path, "name", path)))


def find_model(alias: str) -> ModelSpec | None:
    """The catalog model whose name or aliases match `alias` (case-insensitive), else None."""
    want = alias.strip().lower()
    for path in catalog_entries("models").values():
        d = read_toml(path)
        names = [d["name"], *d.get("aliases", [])]
        if any(want == n.lower() for n in names):
            return model_from_dict(d, where=path.name)
    return None


def list_models() -> list[str]:
    """Names of the shipped models."""
    return list(catalog_entries("models"))


def with_layers(model: ModelSpec, layers: int) -> ModelSpec:
    """A truncated slice of `model` (benchmarks run e.g. 4 of DeepSeek-V3's 61 layers); keeps at most
    `layers` dense layers. Published counts no longer apply, so they are cleared."""
    dense = min(model.dense_layers, layers)
    return replace(model, layers=layers, dense_layers=dense, published_params=0.0, published_active=0.0)
