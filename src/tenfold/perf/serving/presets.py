"""Serving engines: how each one sizes its KV cache, batches requests and overlaps work, as named presets.

Like `training/stack.py` for training, these are facts about the software (documented defaults), not fitted
numbers; a validation row names its preset in the `engine_preset` column and may override a field
(`kv_fraction`, `max_batch_size`, `max_num_tokens`) where its source states the value.

KV-cache sizing, as each engine documents it (KV capacity, not FLOPs, sets many H100-vs-H200 gaps, so it
is modelled the way the engine does it):
* TensorRT-LLM: `kv_cache_free_gpu_mem_fraction` (default 0.90) of the memory left free after the weights
  and the activation/workspace profile; the default capacity scheduler (GUARANTEED_NO_EVICT) admits a
  request only if its whole sequence (input + output) fits. trtllm-bench's perf tables use 0.95 "in many
  cases" (https://github.com/NVIDIA/TensorRT-LLM/blob/main/docs/source/performance/perf-overview.md); its
  tuning heuristic caps the batch at 4096 and sizes the tokens per step to batch x (1 + ISL/OSL)
  within 2048-32768 (tensorrt_llm/bench/build/tuning.py).
* vLLM: `gpu_memory_utilization` (default 0.90) is a fraction of the *whole* GPU memory, from which the
  weights and the profiled activation peak are subtracted; blocks are allocated as sequences grow, so the
  steady state needs the mean sequence length (input + output/2) per request. V1 defaults on
  Hopper/Blackwell servers: max_num_seqs 1024, max_num_batched_tokens 8192.
* SGLang: `mem_fraction_static` (about 0.88 on large GPUs) of the whole memory for weights + KV pool,
  allocation on demand like vLLM; chunked prefill of 8192 tokens.

Sliding-window layers (`window_kv`; gpt-oss alternates 128-token windows with full attention):
* TensorRT-LLM reserves them like full-attention layers. Its KV manager sizes the pool "assuming all layers
  as full attention" (the note on `BlockManager::calculateWindowSizeToShare`) and a window layer's
  blocks are "allocate[d] linearly, and we need as many blocks as full attention" (the `BlockManager`
  constructor), both in cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp of
  https://github.com/NVIDIA/TensorRT-LLM. So a gpt-oss request holds as much KV as if every layer
  attended to its whole sequence, and long outputs fit about half the sequences the windows would allow.
* vLLM's hybrid KV-cache manager and SGLang's SWA memory pool keep only the window's blocks for those
  layers (vLLM docs, "Hybrid KV Cache Manager"; SGLang server argument `--swa-full-tokens-ratio`).

Scheduling and overlap (all presets): continuous (in-flight) batching, so one engine step runs the
decode tokens of every running sequence together with prefill tokens of new requests through the same
GEMMs (step.py); kernel launch costs are the fitted per-kernel overhead (CUDA graphs); MoE
communication under attention DP is exposed unless `ep_overlap` (SGLang's two-batch overlap). How the MoE
layer exchanges tokens under attention DP (`ep_comm`): TensorRT-LLM's CUTLASS MoE path all-gathers every
rank's tokens in FP4/FP8 and reduce-scatters the BF16 outputs (TensorRT-LLM tech blog 3, "Optimizing
DeepSeek R1 Throughput on NVIDIA Blackwell GPUs", its "FP4 AllGather",
https://github.com/NVIDIA/TensorRT-LLM/tree/main/docs/source/blogs/tech_blog);
vLLM dispatches each token only to the ranks holding its experts (plain all-to-all); SGLang's large-EP
deployments run DeepEP (`--moe-a2a-backend deepep`, as in every LMSYS P/D post), whose `--deepep-mode
auto` default takes the normal kernels for prefill batches and the low-latency ones for decode batches
(step.py, "deepep").

Weight-only formats (`weight_only`): weight formats the engine can serve on a GPU without their tensor
cores by dequantising into BF16 GEMMs (precision.as_weight_only):
* TensorRT-LLM: MXFP4 MoE experts (gpt-oss) on Hopper through its TRITON MoE backend (OpenAI's
  triton_kernels, W4A16; tenfold applies it to any MXFP4 FFN); its perf overview runs gpt-oss on
  H100/H200 with `moe_config.backend: TRITON` ("Hopper: use TRITON", docs/source/developer-guide/
  perf-overview.md in github.com/NVIDIA/TensorRT-LLM; tech blog 9, "Deploying GPT-OSS on TensorRT-LLM").
* vLLM: MXFP4 on Hopper and Ampere (triton_kernels, or Marlin MXFP4 MoE: "GPT-OSS works on Ampere
  devices by default, using the TRITON_ATTN attention backend and Marlin MXFP4 MoE", vLLM's GPT-OSS recipe,
  https://github.com/vllm-project/recipes/blob/main/OpenAI/GPT-OSS.md), NVFP4 on GPUs without FP4 tensor
  cores (FP4 Marlin, any GPU from sm80: vllm/model_executor/layers/quantization/utils/marlin_utils_fp4.py)
  and FP8 on GPUs without FP8 tensor cores (FP8 Marlin W8A16, "for GPUs that lack FP8 hardware support":
  marlin_utils_fp8.py in the same folder of github.com/vllm-project/vllm).
* SGLang: MXFP4 MoE on Hopper through OpenAI's triton_kernels, as for gpt-oss in the issue that asked for
  this (SGLang's own page was not re-read for this note).
Block-scaled FP8 (`hidden_block_scales`): on Hopper the CUDA cores apply DeepSeek-style 128 x 128 block
scales inside the GEMM (specs/precision.py, fp8_block). SGLang's DeepEP deployments run their expert and
linear GEMMs through DeepGEMM, whose kernels interleave the promotion FFMAs with the next wgmma, so the
tensor cores keep running: "up to 1550 TFLOPS on H800" (github.com/deepseek-ai/DeepGEMM README, news of
2025.04.18; 0.78 of H800's 1,979 TFLOP/s dense FP8 peak), at or above the best per-tensor FP8 grouped
GEMMs that NVIDIA measured on H100/H200 (0.52-0.79 of peak; aiconfigurator-core moe_perf tables). The
TensorRT-LLM CUTLASS fp8_block_scale MoE and the Triton fused-MoE kernels of vLLM and SGLang without DeepEP
measured there reach only 0.50-0.58 of the per-tensor rate, so those engines pay it.
Weight offload (`weight_offload`): vLLM and SGLang can keep part of the weights in CPU memory
(`--cpu-offload-gb`, "the space in GiB to offload to CPU, per GPU"; vLLM engine arguments,
https://docs.vllm.ai/en/latest/configuration/engine_args.html; SGLang server arguments); tenfold names it
when weights do not fit but does not model its PCIe cost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

KV_BASES = ("free", "total")
KV_RESERVATIONS = ("full", "mean")
EP_COMMS = ("allgather", "alltoall", "deepep")


@dataclass(frozen=True, kw_only=True)
class Engine:
    """Fields:
    name: preset name.
    kv_fraction: share of memory given to the KV cache (see kv_basis).
    kv_basis: "free" = a fraction of the memory left after weights and workspace (TensorRT-LLM);
        "total" = a fraction of the whole memory, from which weights and workspace are then subtracted
        (vLLM, SGLang).
    kv_reservation: "full" = a request reserves KV for input + output tokens before it is admitted;
        "mean" = blocks grow with the sequence, so a running request holds input + output/2 on average.
    max_batch_size: most sequences one attention rank runs at once.
    max_num_tokens: most tokens one engine step processes per attention rank (decode + prefill chunk);
        0 = sized by trtllm-bench's heuristic: batch x (1 + ISL/OSL) rounded up to 256, within 2048-32768.
    runtime_reserve_GiB: CUDA context, NCCL buffers, cuBLAS/CUTLASS workspaces and the sampler, held
        besides weights and activations.
    ep_overlap: MoE dispatch/combine overlaps the other micro-batch's compute (two-batch overlap).
    ep_comm: "allgather" (all-gather tokens, reduce-scatter outputs), "alltoall" (dispatch/combine
        to the ranks holding each token's experts) or "deepep" (DeepEP's normal kernels for prefill,
        low-latency kernels for decode).
    weight_only: weight formats it runs weight-only (BF16 math) where the GPU lacks their tensor cores.
    weight_offload: can hold part of the weights in CPU memory (`--cpu-offload-gb`).
    hidden_block_scales: its block-scaled FP8 GEMMs overlap the scale promotion with the MMAs (DeepGEMM),
        so fp8_block runs at the per-tensor FP8 rate on Hopper too.
    window_kv: its KV manager keeps only the window's tokens for sliding-window layers (False: it
        reserves them like full-attention layers).
    """

    name: str
    kv_fraction: float = 0.90
    kv_basis: str = "free"
    kv_reservation: str = "full"
    max_batch_size: int = 2048
    max_num_tokens: int = 8192
    runtime_reserve_GiB: float = 3.0
    ep_overlap: bool = False
    ep_comm: str = "allgather"
    weight_only: tuple[str, ...] = ("mxfp4",)
    weight_offload: bool = False
    hidden_block_scales: bool = False
    window_kv: bool = True

    def __post_init__(self) -> None:
        if self.ep_comm not in EP_COMMS:
            raise ValueError(f"ep_comm {self.ep_comm!r} not in {EP_COMMS}")
        if not 0.0 < self.kv_fraction <= 1.0:
            raise ValueError(f"kv_fraction must be in (0, 1], got {self.kv_fraction}")
        if self.kv_basis not in KV_BASES:
            raise ValueError(f"kv_basis {self.kv_basis!r} not in {KV_BASES}")
        if self.kv_reservation not in KV_RESERVATIONS:
            raise ValueError(f"kv_reservation {self.kv_reservation!r} not in {KV_RESERVATIONS}")
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.max_num_tokens < 0:
            raise ValueError(f"max_num_tokens must be >= 0 (0 = auto), got {self.max_num_tokens}")
        if self.runtime_reserve_GiB < 0:
            raise ValueError(f"runtime_reserve_GiB must be >= 0, got {self.runtime_reserve_GiB}")


_ENGINES: dict[str, Callable[[], Engine]] = {}


def _register(fn: Callable[[], Engine]) -> Callable[[], Engine]:
    _ENGINES[fn().name] = fn
    return fn


@_register
def _trtllm() -> Engine:
    """TensorRT-LLM serving (trtllm-serve / LLM API) with its defaults: KV fraction 0.90 of free memory,
    max_batch_size 2048, max_num_tokens 8192, guaranteed-no-evict admission."""
    return Engine(name="trtllm", window_kv=False)


@_register
def _trtllm_bench() -> Engine:
    """trtllm-bench throughput as in TensorRT-LLM's perf-overview tables: KV fraction 0.95, batch cap 4096,
    max_num_tokens from its tuning heuristic (batch x (1 + ISL/OSL), within 2048-32768)."""
    return Engine(
        name="trtllm-bench", kv_fraction=0.95, max_batch_size=4096, max_num_tokens=0, window_kv=False
    )


@_register
def _vllm() -> Engine:
    """vLLM V1 (`vllm serve` on Hopper/Blackwell): gpu_memory_utilization 0.90 of total memory, on-demand
    paged blocks, max_num_seqs 1024, max_num_batched_tokens 8192."""
    return Engine(
        name="vllm",
        kv_basis="total",
        kv_reservation="mean",
        max_batch_size=1024,
        max_num_tokens=8192,
        ep_comm="alltoall",
        weight_only=("mxfp4", "nvfp4", "fp8"),
        weight_offload=True,
    )


@_register
def _sglang() -> Engine:
    """SGLang: mem_fraction_static 0.88 of total memory, on-demand KV pool, chunked prefill 8192."""
    return Engine(
        name="sglang",
        kv_fraction=0.88,
        kv_basis="total",
        kv_reservation="mean",
        max_batch_size=4096,
        max_num_tokens=8192,
        ep_comm="deepep",
        weight_offload=True,
        hidden_block_scales=True,
    )


@_register
def _sglang_tbo() -> Engine:
    """SGLang with two-batch overlap (`--enable-two-batch-overlap`): the batch runs as two micro-batches so
    one's DeepEP dispatch/combine hides behind the other's compute, as in SGLang's large-scale EP
    deployments on H100 over InfiniBand (https://lmsys.org/blog/2025-05-05-large-scale-ep, "Two-batch
    Overlap"); otherwise the `sglang` preset."""
    return replace(_sglang(), name="sglang-tbo", ep_overlap=True)


ENGINE_NAMES = tuple(_ENGINES)


def engine(name: str = "trtllm", **overrides: object) -> Engine:
    """A named preset, optionally with fields overridden (`engine("trtllm", kv_fraction=0.95)`)."""
    try:
        base = _ENGINES[name]()
    except KeyError:
        raise ValueError(f"unknown serving engine {name!r}; known: {', '.join(ENGINE_NAMES)}") from None
    return replace(base, **overrides) if overrides else base
