"""Serving memory per GPU: weights by format, the engine's workspace, and the largest batch whose KV cache
fits, sized the way serving engines size it (the engines' documented settings, presets.py):

    B_max = floor(KV budget / KV bytes of one sequence)   per attention rank, then capped by the engine
    KV budget = kv_fraction · (HBM - weights - workspace)     TensorRT-LLM ("free" basis)
              = kv_fraction · HBM - weights - workspace       vLLM / SGLang ("total" basis)

Weights per GPU: attention projections / TP (replicated under attention data parallelism), dense FFN and
shared experts / TP, routed experts / (EP · expert-TP) = / GPUs, embedding and output head BF16 and
vocabulary-parallel / TP, MTP modules (BF16) when speculative decoding uses them. Under pipeline
parallelism a GPU holds its stage's layers (pass `pipeline.stage_model`, the heaviest stage, and the
stage's tp·dp GPUs) and their KV cache, and one vocabulary matrix (the embedding on the first stage, the
output head on the last) instead of both. Workspace: the engine's
runtime reserve plus the activations of one step of `max_num_tokens` tokens and FP32 logits for
`max_batch_size` sequences (subtracting it is what LLMServingSim found missing: 31 % too many KV tokens
without it, https://github.com/casys-kaist/LLMServingSim/pull/59). A sequence reserves input + output
tokens (TensorRT-LLM) or input + output/2 on average (on-demand paging), with sliding-window layers
sized as the engine's KV manager sizes them (presets.py, `window_kv`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tenfold.perf.serving.kvcache import kv_bytes_per_sequence
from tenfold.perf.serving.presets import Engine
from tenfold.perf.serving.step import Formats
from tenfold.perf.specs.catalog import GiB
from tenfold.perf.specs.models import ModelSpec


@dataclass(frozen=True, kw_only=True)
class ServingMemory:
    """Bytes per GPU (SI) and the batch limit per attention rank.

    weights_B: all weights on the GPU; workspace_B: runtime reserve + activations + logits;
    kv_budget_B: memory the engine gives the KV cache; kv_per_sequence_B: one sequence's reservation;
    max_batch_memory: sequences per attention rank the KV budget holds (0 if none);
    max_num_tokens: tokens per step the workspace was sized for (the engine's, or trtllm-bench's heuristic);
    capacity_B: the GPU's memory.
    """

    weights_B: float
    workspace_B: float
    kv_budget_B: float
    kv_per_sequence_B: float
    max_batch_memory: int
    max_num_tokens: int
    capacity_B: float

    @property
    def weights_GiB(self) -> float:
        return self.weights_B / GiB

    def need_and_usable_GiB(self, kv_fraction: float = 1.0, kv_basis: str = "total") -> tuple[float, float]:
        """GiB per GPU needed to hold one sequence (weights + workspace + its KV) and GiB the engine may
        use: all of HBM with the "free" basis, where the KV gets kv_fraction of what is left (so one
        sequence needs its KV / kv_fraction), kv_fraction of HBM with "total" (presets.py)."""
        w, work, seq = self.weights_B / GiB, self.workspace_B / GiB, self.kv_per_sequence_B / GiB
        if kv_basis == "free":
            return w + work + seq / kv_fraction, self.capacity_B / GiB
        return w + work + seq, kv_fraction * self.capacity_B / GiB

    def shortfall(self, kv_fraction: float = 1.0, kv_basis: str = "total") -> str:
        """'' if at least one sequence fits, else by how much it does not, per GPU, with the parts
        (fit_advice.py says what would fit)."""
        if self.max_batch_memory >= 1:
            return ""
        need, usable = self.need_and_usable_GiB(kv_fraction, kv_basis)
        return (
            f"needs {need:.1f} GiB per GPU (weights {self.weights_GiB:.1f} + workspace "
            f"{self.workspace_B / GiB:.1f} + one sequence's KV {self.kv_per_sequence_B / GiB:.2f}), has "
            f"{usable:.1f} GiB usable of {self.capacity_B / GiB:.0f}: "
            f"short by {need - usable:.1f} GiB per GPU"
        )


def weight_bytes(
    model: ModelSpec, *, tp: int, gpus: int, formats: Formats, draft_tokens: int, pp: int = 1
) -> dict:
    """Weight bytes on one GPU by part (attention, ffn, experts, embeddings, mtp); `gpus` are the GPUs the
    experts spread over (one stage's), `pp` > 1 keeps one vocabulary matrix per stage."""
    wb, ab = formats.weights.operand_bytes, formats.attention.operand_bytes
    h = model.hidden
    attn = model.layers * model.attention_matmul_params() * ab / tp
    ffn = model.n_dense_layers * model.mlp_matmul_params(model.ffn) * wb / tp
    router = model.moe_layers * model.router_params() * 2.0 / tp
    shared = model.moe_layers * model.shared_experts * model.expert_params() * wb / tp
    experts = model.expert_total_params() * wb / gpus
    emb = (model.embedding_params() + (0 if model.tied_embeddings else model.vocab * h)) * 2.0 / tp
    if pp > 1:  # the first stage holds the embedding, the last the head: one vocab x h matrix each
        emb = model.vocab * h * 2.0 / tp
    mtp = 0.0
    if draft_tokens and model.mtp_layers:
        routed = model.experts * model.expert_params() if model.is_moe else 0
        mtp = model.mtp_layers * ((model.mtp_params() / model.mtp_layers - routed) / tp + routed / gpus) * 2.0
    return {
        "attention": attn,
        "ffn": ffn + router + shared,
        "experts": experts,
        "embeddings": emb,
        "mtp": mtp,
    }


def auto_max_num_tokens(batch: float, input_len: int, output_len: int) -> int:
    """trtllm-bench's heuristic (tensorrt_llm/bench/build/tuning.py `finetune_setting`): batch x (1 + ISL/OSL)
    rounded up to 256 below 4096 tokens, to 512 below 8192, else to 1024, within 2048-32768."""
    raw = min(batch * (1 + input_len / output_len), 32768)
    step = 256 if raw < 4096 else 512 if raw < 8192 else 1024
    return int(min(max(2048, step * math.ceil(raw / step)), 32768))


def workspace_bytes(model: ModelSpec, eng: Engine, *, tp: int, max_num_tokens: int) -> float:
    """Runtime reserve + activations of one step of max_num_tokens tokens + FP32 logits for the batch."""
    h = model.hidden
    dense = (3 if model.gated else 2) * model.ffn / tp if model.n_dense_layers else 0.0
    moe = model.topk * (h + 2 * model.moe_ffn) if model.is_moe else 0.0  # permuted copies + gate/up out
    per_token = 2.0 * (8 * h + max(dense, moe))
    logits = min(eng.max_batch_size, max_num_tokens) * model.vocab / tp * 4.0
    return eng.runtime_reserve_GiB * GiB + max_num_tokens * per_token + logits


def serving_memory(
    model: ModelSpec,
    eng: Engine,
    *,
    capacity_B: float,
    tp: int,
    gpus: int,
    formats: Formats,
    input_len: int,
    output_len: int,
    draft_tokens: int = 0,
    pp: int = 1,
) -> ServingMemory:
    """Weights, workspace, KV budget and the memory batch limit per attention rank on one GPU (under
    pipeline parallelism `model` is the stage's and `gpus` the stage's GPUs; module docstring)."""
    weights = sum(
        weight_bytes(model, tp=tp, gpus=gpus, formats=formats, draft_tokens=draft_tokens, pp=pp).values()
    )
    tokens = input_len + (output_len if eng.kv_reservation == "full" else output_len / 2) + draft_tokens
    per_seq = float(kv_bytes_per_sequence(model, formats.kv, tokens, tp=tp, windows_kept=eng.window_kv))

    def fit(step_tokens: int) -> tuple[float, float, int]:
        work = workspace_bytes(model, eng, tp=tp, max_num_tokens=step_tokens)
        if eng.kv_basis == "free":
            budget = eng.kv_fraction * (capacity_B - weights - work)
        else:
            budget = eng.kv_fraction * capacity_B - weights - work
        return work, budget, math.floor(budget / per_seq) if budget > 0 else 0

    step_tokens = eng.max_num_tokens or 2048
    work, budget, fits = fit(step_tokens)
    if eng.max_num_tokens == 0 and fits > 0:  # trtllm-bench sizes the step to the batch it expects
        step_tokens = auto_max_num_tokens(min(fits, eng.max_batch_size), input_len, output_len)
        work, budget, fits = fit(step_tokens)
    return ServingMemory(
        weights_B=weights,
        workspace_B=work,
        kv_budget_B=budget,
        kv_per_sequence_B=per_seq,
        max_batch_memory=max(fits, 0),
        max_num_tokens=step_tokens,
        capacity_B=capacity_B,
    )
