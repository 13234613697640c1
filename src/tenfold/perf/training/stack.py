"""Software stacks: what the training framework overlaps and how it schedules, as named presets.

The same layout runs at different speeds under Megatron-LM of 2021 (no flash attention, nothing overlapped)
and Megatron-Core of 2025 (flash attention, TP/DP/PP communication overlapped with compute). These are facts
about the software a run used, not fitted numbers; a validation row names its preset in the `software`
column. Overlap rules (exposed time = what the step waits for):

* TP (`tp_overlap`, TE userbuffers): a collective hides behind the GEMMs of the same layer and pass;
  exposed = max(0, comm - gemm) + `tp_overlap_residual` x comm (`TP_OVERLAP_RESIDUAL`, 0.1, for TE: the
  first chunk cannot be hidden; torchtitan's async TP leaves far more, see `TORCHTITAN_ASYNC_TP_RESIDUAL`).
  Without overlap the whole collective is exposed.
* DP (`dp_overlap`): gradient reduce-scatter (or all-reduce) hides behind the backward of the last
  micro-batch, the parameter all-gather behind the forward of the first; ZeRO-3/FSDP gathers and
  reductions (one per layer, each paying its ring latency) hide behind each micro-batch's compute, except
  the first layer's gather of every forward and backward pass and the step's last reduce-scatter
  (step._fsdp_exposed).
* PP (`pp_overlap`): point-to-point sends overlap the next chunk's compute (Megatron `overlap_p2p_comm`,
  interleaved schedule only: with vp = 1 the sends block); without it each send adds to the stage time.
  DualPipe hides them by construction.
* CP ring: KV exchanges hide behind the blockwise attention compute; all-gather and a2a CP are exposed.
* EP (`ep_overlap`, Megatron `moe_a2a_overlap` / DeepSeek DualPipe): a micro-batch's dispatch/combine
  all-to-all hides behind another micro-batch's layer compute; otherwise fully exposed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tenfold.perf.specs.models import ModelSpec

TP_OVERLAP_RESIDUAL = 0.1
TORCHTITAN_ASYNC_TP_RESIDUAL = 0.6
"""Share of the TP collectives torchtitan's async TP leaves exposed, from its published runs with and
without it (Grand Teton H100, FSDP + TP8): Llama 3.1 70B float8 829 -> 876 tok/s/GPU (1.057x,
benchmarks/llama3_h100_202412_torchtitan.md Table 4, torchtitan 9dec370); Llama 3.1 70B bf16 597.3 -> 652.4
(1.092x), 70B float8 809.8 -> 942.4 (1.164x), 8B float8 5078.1 -> 5570.1 (1.097x)
(benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md). Under TE's 0.1 the model gave 1.24-1.37x for these
pairs; the residual that reproduces each measured ratio is 0.79, 0.61, 0.44 and 0.66 (mean 0.62, rounded to
one figure). A measured on/off ratio, not a fit to the rows' throughputs."""
SCHEDULES = ("1f1b", "dualpipe")
CP_COMMS = ("ring", "allgather", "a2a")
KERNEL_FAMILIES = ("te", "torch")
CUDA_GRAPH_MODES = ("none", "per_layer", "full_iteration")
"""Validation rows' `cuda_graph` values: no CUDA graphs, per-module graphs (Transformer Engine
`make_graphed_callables` / Megatron-Core `local` on scopes such as attn, moe_router, moe_preprocess), or the
whole forward-backward step as one graph (Megatron-Core `full_iteration`). Only the last changes a
prediction (`Stack.full_iteration_graph`)."""
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe_act", "moe", "shared_experts", "op")
"""What `recompute="selective"` recomputes: Megatron-Core `TransformerConfig.recompute_modules` names
(https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/transformer/transformer_config.py), plus
"op" for torchtitan's per-op selective checkpointing (`selective_ac_option = "op"`)."""


@dataclass(frozen=True, kw_only=True)
class Stack:
    """Fields:
    name: preset name.
    kernels: the kernel library the layers run on: "te" (Transformer Engine and Megatron's fused kernels,
        or their 2021 predecessors: what the calibration's GEMM efficiencies are fitted on) or "torch"
        (PyTorch-native: torch.compile, torchao float8, FSDP2), whose compute rate the calibration scales by
        `torch_kernel_efficiency`.
    flash_attention: fused attention without materialised s x s scores (FlashAttention / cuDNN).
    tp_overlap, tp_overlap_residual, dp_overlap, pp_overlap, ep_overlap: see the module docstring.
    ep_dedup: MoE dispatch sends a token once per remote domain (DeepEP / HybridEP / node-limited routing).
    pp_schedule: "1f1b" (interleaved when vp > 1) or "dualpipe" (DeepSeek-V3, arXiv 2412.19437 §3.2.1).
    cp_comm: context-parallel algorithm: "ring" (p2p KV exchange), "allgather" (Llama 3), "a2a" (Ulysses).
    balanced_stages: the pipeline layout accounts for the embedding/head (Megatron-Core
        `account_for_embedding/loss_in_pipeline_split`); otherwise the last stage also carries the head.
    grad_reduce_bytes: bytes per gradient element in the data-parallel reduction.
    main_grad_bytes: bytes per parameter of the gradient buffer (fp32 main grads in Megatron).
    default_zero: ZeRO stage used when a layout does not say (1 = Megatron distributed optimizer).
    fsdp_regather: ZeRO-3/FSDP gathers the weights again for every micro-batch (Megatron-FSDP); False keeps
        them gathered across the micro-batches of a step (gathers and reductions once per step).
    fused_sink_timing: how the attention core of a model with learnable softmax sinks (gpt-oss) is timed.
        Memory always counts it fused under a flash stack: Transformer Engine fuses sink attention since
        2.8 with cuDNN 9.13.1 (https://github.com/NVIDIA/TransformerEngine/pull/2148), and the published
        gpt-oss runs fit only that way (materialised scores would need 434-509 GiB per GPU for the 26.06
        runs). Timed as a fused kernel (True) those runs come out 38-85 % faster than measured; timed as if
        the s x s scores were materialised (False, the default) they come out 0-39 % slower. No public
        measurement explains the gap (docs/perf.md), so the default is a stand-in, not a mechanism.
    full_iteration_graph: the whole forward-backward step is captured as one CUDA graph (Megatron-Core
        `cuda_graph_impl="full_iteration"`). A graph cannot hold a host synchronisation, so dropless MoE
        then runs sync-free: the experts' buffers are padded to a fixed per-rank capacity instead of being
        sized from token counts copied to the host (Megatron-LM PR 4247, "paged stashing"; Megatron-Bridge
        v0.5.0 `set_full_iter_cg_configs` in scripts/performance/configs/*/..._llm_pretrain.py). The
        per-MoE-layer host cost that `Calibration.moe_layer_overhead_us` charges (that synchronisation and
        the launches around it) is then not charged; the kernels themselves still are.
    interleaving: the pipeline engine has the interleaved (virtual-stage) schedule; DeepSpeed's
        PipelineEngine does not.
    interleave_needs_pp_multiple: the interleaved schedule runs only when the micro-batches per step are a
        multiple of the pipeline size (Megatron-Core, see layout.RULES "vp_microbatches"); Meta's Llama 3
        schedule lifts it (arXiv 2407.21783 §3.3.2: "we modify our pipeline schedule ... N flexibly").
    recompute_modules: what selective recomputation recomputes (RECOMPUTE_MODULES; memory.py says what
        each one frees). Megatron-Core's default is ["core_attn"]; recipes and papers list others.
    activation_offload_layers: layers per model chunk whose activations go to host memory between their
        forward and backward (Megatron-Core `cpu_offloading_num_layers`, activations only); 0 = none.
    default_micro_batch, default_vp, default_recompute: what the stack runs when a launch leaves the
        micro-batch size, the virtual pipeline size or the recomputation unset, from its public configs
        (None = no documented default: the value is unknown and the validation reports a range over the
        plausible values instead of guessing). Each preset cites its source.
    """

    name: str
    kernels: str = "te"
    flash_attention: bool = True
    tp_overlap: bool = True
    tp_overlap_residual: float = TP_OVERLAP_RESIDUAL
    dp_overlap: bool = True
    pp_overlap: bool = True
    ep_overlap: bool = False
    ep_dedup: bool = False
    pp_schedule: str = "1f1b"
    cp_comm: str = "ring"
    balanced_stages: bool = True
    grad_reduce_bytes: float = 4.0
    main_grad_bytes: float = 4.0
    default_zero: int = 1
    fsdp_regather: bool = True
    fused_sink_timing: bool = False
    full_iteration_graph: bool = False
    interleaving: bool = True
    interleave_needs_pp_multiple: bool = True
    recompute_modules: tuple[str, ...] = ("core_attn",)
    activation_offload_layers: int = 0
    default_micro_batch: int | None = None
    default_vp: int | None = None
    default_recompute: str | None = None

    @property
    def selective_policy(self) -> str:
        """What "selective" recomputation costs in time: "op" (torchtitan's per-op checkpointing recomputes
        every second matmul of a block and all memory-bound ops, `compute.op_sac_recompute`) when
        `recompute_modules` names it, else "attention" (Megatron's module recompute; Korthikanti et al. 2022
        §5 for the attention core)."""
        return "op" if "op" in self.recompute_modules else "attention"

    def __post_init__(self) -> None:
        if self.pp_schedule not in SCHEDULES:
            raise ValueError(f"pp_schedule {self.pp_schedule!r} not in {SCHEDULES}")
        if self.kernels not in KERNEL_FAMILIES:
            raise ValueError(f"kernels {self.kernels!r} not in {KERNEL_FAMILIES}")
        if self.cp_comm not in CP_COMMS:
            raise ValueError(f"cp_comm {self.cp_comm!r} not in {CP_COMMS}")
        if self.default_zero not in (0, 1, 2, 3):
            raise ValueError(f"default_zero must be 0-3, got {self.default_zero}")
        unknown = [m for m in self.recompute_modules if m not in RECOMPUTE_MODULES]
        if unknown:
            raise ValueError(f"recompute_modules {unknown} not in {RECOMPUTE_MODULES}")
        if self.activation_offload_layers < 0:
            raise ValueError(f"activation_offload_layers must be >= 0, got {self.activation_offload_layers}")
        if self.default_recompute not in (None, "none", "selective", "full"):
            raise ValueError(f"default_recompute {self.default_recompute!r} is not none, selective or full")


_STACKS: dict[str, Callable[[], Stack]] = {}


def _register(fn: Callable[[], Stack]) -> Callable[[], Stack]:
    _STACKS[fn().name] = fn
    return fn


@_register
def _megatron_core() -> Stack:
    """Megatron-Core / NeMo / Megatron-Bridge 2024-26 performance recipes (the default).

    Unset knobs: the Megatron-Bridge recipe base configs set `train.micro_batch_size = 1`,
    `model.virtual_pipeline_model_parallel_size = None` (no interleaving) and
    `model.recompute_granularity = None` (no recomputation) unless a recipe overrides them
    (https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/main/src/megatron/bridge/recipes/llama/llama3.py);
    Megatron-Core's own `ModelParallelConfig` / `TransformerConfig` default the latter two to None as well."""
    return Stack(name="megatron-core", default_micro_batch=1, default_vp=1, default_recompute="none")


@_register
def _megatron_core_nooverlap() -> Stack:
    """Megatron-Core with TP and p2p overlap disabled (SimuMax's B200 reproduction launcher).

    The launcher calls Megatron-LM's pretrain_gpt.py, whose interleaving and recomputation flags are opt-in
    (`--num-layers-per-virtual-pipeline-stage` and `--recompute-granularity` default to None,
    https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/training/arguments.py); `--micro-batch-size`
    has no default (None), so an unstated micro-batch stays unknown."""
    return Stack(
        name="megatron-core-nooverlap",
        tp_overlap=False,
        pp_overlap=False,
        dp_overlap=False,
        default_vp=1,
        default_recompute="none",
    )


@_register
def _megatron_2021() -> Stack:
    """Megatron-LM as in Narayanan et al. 2021, Korthikanti et al. 2022 and MT-NLG: unfused attention
    (scaled-masked softmax + dropout on materialised scores), no communication overlap, no distributed
    optimizer, fp16 gradients, the head on the last stage.

    No defaults for unset knobs: `--micro-batch-size` has no default in Megatron-LM's arguments, and the
    papers' tables come from hand-written launch scripts that set interleaving and activation checkpointing
    per model (Narayanan et al. 2021, arXiv 2104.04473, tunes both per run), so a table that leaves them out
    does not mean "off"."""
    return Stack(
        name="megatron-2021",
        flash_attention=False,
        tp_overlap=False,
        dp_overlap=False,
        pp_overlap=False,
        balanced_stages=False,
        grad_reduce_bytes=2.0,
        main_grad_bytes=4.0,
        default_zero=0,
    )


@_register
def _megatron_deepspeed_2021() -> Stack:
    """Megatron-DeepSpeed as used for MT-NLG 530B (Smith et al. 2022): Megatron tensor parallelism with
    DeepSpeed's pipeline engine (1F1B, no interleaving), unfused attention, no overlap."""
    return replace(_megatron_2021(), name="megatron-deepspeed-2021", interleaving=False)


@_register
def _metaseq_2022() -> Stack:
    """metaseq (OPT-175B): Megatron TP inside FSDP with prefetching; unfused attention.

    Unset recomputation is full: metaseq's OPT launcher always passes `--checkpoint-activations`
    (metaseq/launcher/opt_baselines.py, https://github.com/facebookresearch/metaseq). Its micro-batch is
    the whole per-rank batch (`--update-freq 1`), which depends on the global batch, so a row states it."""
    return Stack(
        name="metaseq-2022",
        flash_attention=False,
        tp_overlap=False,
        pp_overlap=False,
        balanced_stages=False,
        grad_reduce_bytes=2.0,
        default_zero=3,
        default_recompute="full",
    )


@_register
def _meta_llama3() -> Stack:
    """Meta's Llama 3 training stack (arXiv 2407.21783 §3.3): 4D parallelism with FSDP as the data-parallel
    layer; parameters stay gathered across the micro-batches of a step, so FSDP traffic is once per step.
    The stack is not public: no defaults for unset knobs."""
    return Stack(name="meta-llama3", fsdp_regather=False, interleave_needs_pp_multiple=False)


@_register
def _deepseek_v3() -> Stack:
    """DeepSeek-V3's own framework: DualPipe, node-limited deduplicated dispatch overlapped with compute.

    DualPipe replaces the interleaved schedule (each rank holds its two chunks by construction,
    https://github.com/deepseek-ai/DualPipe), so there are no virtual stages to choose: vp = 1. The
    framework is not public: no default micro-batch or recomputation."""
    return Stack(name="deepseek-v3", pp_schedule="dualpipe", ep_overlap=True, ep_dedup=True, default_vp=1)


@_register
def _torchtitan() -> Stack:
    """torchtitan (PyTorch-native FSDP2 + TP + PP + CP, torch.compile, torchao float8) as in its H100
    benchmarks (https://github.com/pytorch/torchtitan/tree/main/benchmarks). float8 tensorwise and rowwise
    both map to the `fp8` precision. Runs without async TP (`enable_async_tensor_parallel = false`,
    torchtitan's default) need `stack("torchtitan", tp_overlap=False)`; the shipped rows with TP all use
    async TP."""
    return Stack(
        name="torchtitan",
        # Matmuls through torch.mm / torch._scaled_mm (the float8 converter swaps nn.Linear for torchao's
        # Float8Linear, torchtitan docs/float8.md) and inductor-generated fused ops, not Transformer Engine.
        kernels="torch",
        # F.scaled_dot_product_attention(is_causal=True) (torchtitan/models/llama/model.py at commit 9dec370),
        # which dispatches to the fused flash / cuDNN kernels.
        flash_attention=True,
        # Async TP (torch._inductor micro-pipelining of the TP all-gather / reduce-scatter with the matmuls,
        # benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md): the same hide-behind-the-GEMM rule as TE,
        # but the published on/off runs show most of the collective still exposed.
        tp_overlap=True,
        tp_overlap_residual=TORCHTITAN_ASYNC_TP_RESIDUAL,
        # FSDP2 prefetches the next layer's all-gather and overlaps the reduce-scatter (docs/fsdp.md).
        dp_overlap=True,
        # Assumed: torch.distributed.pipelining documents no Megatron-style overlap_p2p_comm; a stage waits
        # for its recv before it runs.
        pp_overlap=False,
        # generate_split_points (torchtitan/parallelisms/pipelining_utils.py, Dec 2024) splits the layers
        # evenly and leaves the embedding on the first stage and the norm + output on the last.
        balanced_stages=False,
        # experimental.context_parallel_rotate_method defaults to "allgather" (torchtitan/config_manager.py
        # at commit 9dec370).
        cp_comm="allgather",
        # FSDP2 shards parameters, gradients and optimizer states (ZeRO-3); gradients reduced in fp32
        # (training.mixed_precision_reduce = "float32", config_manager.py).
        default_zero=3,
        grad_reduce_bytes=4.0,
        main_grad_bytes=4.0,
        # reshard_after_forward = not pp_enabled (torchtitan/parallelisms/parallelize_llama.py at 9dec370):
        # with PP the weights stay gathered across the micro-batches; without PP a step is one micro-batch
        # in the benchmarks (no gradient accumulation).
        fsdp_regather=False,
        # The shipped train configs (train_configs/llama3_*.toml at 9dec370) set mode = "selective" with
        # selective_ac_option = "op": the policy in _apply_ac_to_transformer_block (torchtitan/parallelisms/
        # parallelize_llama.py at 9dec370) saves the outputs of flash/efficient SDPA, reduce-scatter, max/abs
        # and every odd-numbered aten.mm of a block, and recomputes everything else.
        recompute_modules=("op",),
    )


STACK_NAMES = tuple(_STACKS)


def uses_flash(model: ModelSpec, software: Stack) -> bool:
    """Attention timed as a fused (flash) kernel, unless the model has sinks and the stack times them as
    materialised scores (`Stack.fused_sink_timing`, a stand-in). Memory follows `flash_attention` alone."""
    return software.flash_attention and (software.fused_sink_timing or not model.attention_sinks)


def stack(name: str = "megatron-core", **overrides: object) -> Stack:
    """A named preset, optionally with fields overridden (`stack("megatron-core", ep_overlap=True)`)."""
    try:
        base = _STACKS[name]()
    except KeyError:
        raise ValueError(f"unknown software stack {name!r}; known: {', '.join(STACK_NAMES)}") from None
    return replace(base, **overrides) if overrides else base
