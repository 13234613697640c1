"""Post-training quantization for inference: `quantize_for_inference(model, scheme, activations=...)`.

Each chosen linear layer (`nn.Linear`, or Hugging Face's GPT-2 `Conv1D`) is replaced by an
`InferenceLinear` that keeps only the quantized weight: the element codes and scales of a
`tenfold.formats.QuantizedTensor`, as buffers, so the memory saving is real and `state_dict()` holds
codes, not floats. On every call the stored weight is decoded to fp32 and, when activations are
quantized, the input is fake-quantized along its last axis (the GEMM's reduction axis, where the block
scales of MX and NVFP4 live) with scales computed from that very batch (dynamic scaling: no
calibration data, no state). The product is an fp32 matmul of the two quantized operands, the values a
low-precision tensor core multiplies:

    y = Q(x) · deq(W_q)ᵀ + b         (weight + activations, "W4A4" for nvfp4 and mxfp4)
    y =    x · deq(W_q)ᵀ + b         (weight only, "W4A16")

Which layers are quantized is decided by `convert()`'s own `ConversionPolicy` (include/exclude regexes,
high-precision first/last blocks, whole-block shapes), applied through a forward-only recipe. By default the
LM head stays in high precision (as NVIDIA's recipes and AMD Quark's MXFP4 checkpoints keep it: NVIDIA,
"Pretraining Large Language Models with NVFP4", arXiv 2509.25149 §4.1, https://arxiv.org/abs/2509.25149;
https://huggingface.co/amd/DeepSeek-R1-0528-MXFP4), and so does every module that is not a linear layer
(embedding tables are lookups, not GEMMs). A weight shared with another module (tied embeddings) is kept too:
quantizing one user of it would save no memory.

Storage per weight element, scales counted: NVFP4 4.5 bits (E2M1 codes + one E4M3 scale per 16) plus a 4-byte
fp32 tensor scale (NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference",
https://developer.nvidia.com/blog/introducing-nvfp4-for-efficient-and-accurate-low-precision-inference/);
MXFP4 4.25 and MXFP8 8.25 bits (one E8M0 scale per 32 elements: OCP MX v1.0 spec §5,
https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf); FP8 with one fp32
scale per tensor or per row. `PTQReport` (in `report.py`) gives the bytes before and after.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import torch
from torch import nn

from tenfold.engine.convert import ConversionPolicy, LayerDecision, convert, is_conv1d, replace_module
from tenfold.engine.linear import QuantLinear
from tenfold.engine.ptq.report import KeptModule, PTQLayer, PTQReport
from tenfold.engine.recipes import GemmQuant, Recipe
from tenfold.formats import QuantizedTensor, Scheme, fake_quantize, quantize, scheme
from tenfold.formats.fake import QUANT_PATHS
from tenfold.formats.scheme import Scaling

# The formats the issue names for inference; other current-scaling schemes work too, untested.
PTQ_SCHEMES: tuple[str, ...] = ("nvfp4", "mxfp4", "mxfp8_e4m3", "fp8_e4m3_tensor", "fp8_e4m3_row")


class InferenceLinear(nn.Module):
    """y = Q(x)·Ŵᵀ + b with Ŵ decoded from stored codes and scales; Q is None for weight-only.

    Buffers: ``weight_codes``, ``weight_scales`` and, for NVFP4, ``weight_amax`` (the fp32 tensor amax
    behind the second-level scale). The bias, if any, stays a high-precision Parameter. Inference only:
    no gradient flows through the quantized activations.

    Args:
        qweight: the weight as an (out, in) `QuantizedTensor`, blocks along in-features.
        bias: bias of the original layer, or None.
        act_scheme: scheme for the activations (dynamic, per call), or None to leave them untouched.
        quant_backend: fake_quantize backend for the activations: eager (default) | reference | compiled
            | auto. `auto` compiles a kernel per activation shape, which repays itself only for fixed
            shapes.
    """

    def __init__(
        self,
        qweight: QuantizedTensor,
        bias: torch.Tensor | None,
        *,
        act_scheme: Scheme | None,
        quant_backend: str = "eager",
    ) -> None:
        super().__init__()
        if len(qweight.shape) != 2:
            raise ValueError(f"expected a 2-D (out, in) weight, got shape {qweight.shape}")
        if quant_backend not in QUANT_PATHS:
            raise ValueError(f"quant_backend {quant_backend!r} is not one of: {', '.join(QUANT_PATHS)}")
        self.out_features, self.in_features = qweight.shape
        self.weight_scheme = qweight.scheme
        self.act_scheme = act_scheme
        self.quant_backend = quant_backend
        self._weight_dtype = qweight.dtype
        self._working_shape = qweight.working_shape
        self.register_buffer("weight_codes", qweight.codes)
        self.register_buffer("weight_scales", qweight.scales)
        self.register_buffer("weight_amax", qweight.amax)
        self.bias = bias if bias is None or isinstance(bias, nn.Parameter) else nn.Parameter(bias)

    @classmethod
    def from_linear(
        cls,
        linear: nn.Module,
        weight_scheme: Scheme,
        *,
        act_scheme: Scheme | None,
        quant_backend: str = "eager",
    ) -> InferenceLinear:
        """Quantize an nn.Linear (weight (out, in)) or Conv1D (weight (in, out)) layer's weight."""
        w = linear.weight.detach()
        if is_conv1d(linear):
            w = w.t()
        return cls(
            quantize(w.contiguous(), weight_scheme),
            linear.bias,
            act_scheme=act_scheme,
            quant_backend=quant_backend,
        )

    @property
    def qweight(self) -> QuantizedTensor:
        """The stored weight as a QuantizedTensor (a view of the buffers, on their current device)."""
        return QuantizedTensor(
            codes=self.weight_codes,
            scales=self.weight_scales,
            amax=self.weight_amax,
            scheme=self.weight_scheme,
            shape=(self.out_features, self.in_features),
            dtype=self._weight_dtype,
            working_shape=self._working_shape,
        )

    def dequantized_weight(self) -> torch.Tensor:
        """Ŵ as fp32 (out, in): the values the GEMM multiplies."""
        return self.qweight.dequantize(torch.float32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"expected input with last dim {self.in_features}, got shape {tuple(x.shape)}")
        x2 = x.reshape(-1, self.in_features).to(torch.float32)
        if self.act_scheme is not None:
            x2 = fake_quantize(x2, self.act_scheme, backend=self.quant_backend)
        y = x2 @ self.dequantized_weight().t()
        if self.bias is not None:
            y = y + self.bias.to(torch.float32)
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        act = self.act_scheme.name if self.act_scheme is not None else "high precision"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, weight={self.weight_scheme.name}, activations={act}"
        )


def resolve_scheme(s: Scheme | str) -> Scheme:
    """The scheme to quantize with, checked for inference use (current scaling, 1-D or per-tensor/row)."""
    sc = scheme(s) if isinstance(s, str) else s
    if not isinstance(sc, Scheme):
        raise ValueError(f"scheme must be a tenfold.formats.Scheme or a scheme name, got {type(s).__name__}")
    if sc.scaling == Scaling.DELAYED:
        raise ValueError(f"{sc.name}: delayed scaling needs an amax history; use current scaling for PTQ")
    if sc.hadamard:
        raise ValueError(f"{sc.name}: quantize_for_inference does not apply Hadamard rotations")
    if sc.is_2d:
        raise ValueError(f"{sc.name}: 2-D blocks do not apply to activations; use a 1-D block scheme")
    if sc.axis != -1:
        raise ValueError(f"{sc.name}: axis={sc.axis}; PTQ places blocks along the reduction axis (-1)")
    return sc


def _storage(tensors: list[torch.Tensor]) -> int:
    """Bytes of distinct tensors (a tensor reached twice, e.g. tied weights, counts once)."""
    seen: dict[tuple[int, int], int] = {}
    for t in tensors:
        if t is None or t.is_meta:
            continue
        seen[(t.untyped_storage().data_ptr(), t.storage_offset())] = t.numel() * t.element_size()
    return sum(seen.values())


def _model_bytes(model: nn.Module) -> int:
    return _storage([*model.parameters(), *model.buffers()])


def _tied_users(model: nn.Module) -> dict[int, list[str]]:
    """id(parameter) -> the qualified names of the modules that hold it."""
    users: dict[int, list[str]] = {}
    for mname, m in model.named_modules(remove_duplicate=False):
        for p in m.parameters(recurse=False):
            users.setdefault(id(p), [])
            if mname not in users[id(p)]:
                users[id(p)].append(mname)
    return users


def _kept_modules(model: nn.Module, linear_names: set[str]) -> tuple[KeptModule, ...]:
    out = []
    for name, m in model.named_modules():
        if name in linear_names or isinstance(m, InferenceLinear):
            continue
        params = list(m.parameters(recurse=False))
        if not params:
            continue
        kind = type(m).__name__
        if isinstance(m, nn.Embedding | nn.EmbeddingBag):
            reason = "an embedding table is a lookup, not a GEMM: kept in high precision"
        else:
            reason = f"{kind} is not a linear layer: kept in high precision"
        numel = sum(p.numel() for p in params)
        out.append(KeptModule(name=name, kind=kind, numel=numel, nbytes=_storage(params), reason=reason))
    return tuple(out)


def _layer(
    d: LayerDecision, w: torch.Tensor, quantized: bool, reason: str, after: int, scheme: str | None = None
) -> PTQLayer:
    return PTQLayer(
        scheme=scheme,
        name=d.name,
        kind=d.kind,
        in_features=d.in_features,
        out_features=d.out_features,
        block=d.block,
        quantized=quantized,
        reason=reason,
        weight_numel=w.numel(),
        weight_bytes_before=w.numel() * w.element_size(),
        weight_bytes_after=after,
    )


@torch.no_grad()
def quantize_for_inference(
    model: nn.Module,
    scheme: Scheme | str,
    *,
    activations: bool = True,
    policy: ConversionPolicy | None = None,
    quant_backend: str = "eager",
    layer_schemes: Mapping[str, Scheme | str | None] | None = None,
) -> PTQReport:
    """Quantize `model`'s linear layers for inference with `scheme`, in place; return what was done.

    `scheme` is a name (see `PTQ_SCHEMES`) or a `Scheme` (e.g. ``scheme("mxfp4", scale_mode="rceil")``).
    With `activations` the inputs of quantized layers are fake-quantized with the same scheme along
    the reduction axis, scales from each batch; without, they stay untouched (weight-only). `policy`
    picks the layers exactly as for `convert` (its backend fields do not apply here).

    `layer_schemes` (mixed precision, e.g. from `tenfold.engine.ptq.policy.choose_policy`) maps qualified
    layer names to their own scheme (weights, and activations when `activations`), or to None to keep that
    layer in high precision; layers it does not name use `scheme`.

    >>> from torch import nn
    >>> m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
    >>> r = quantize_for_inference(m, "mxfp8_e4m3")
    >>> len(r.quantized), r.bits_per_element
    (2, 8.25)
    """
    s = resolve_scheme(scheme)
    if quant_backend not in QUANT_PATHS:
        raise ValueError(f"quant_backend {quant_backend!r} is not one of: {', '.join(QUANT_PATHS)}")
    pol = policy or ConversionPolicy()
    if not isinstance(pol, ConversionPolicy):
        raise ValueError(f"policy must be a ConversionPolicy, got {type(pol).__name__}")
    trained = [n for n, m in model.named_modules() if isinstance(m, QuantLinear | InferenceLinear)]
    if trained:
        raise ValueError(
            f"{len(trained)} layers are already quantized (first: {trained[0]!r}); quantize_for_inference "
            "wants a high-precision model: load the trained weights into a fresh, unconverted model"
        )
    if not isinstance(activations, bool):
        raise ValueError(f"activations must be True or False, got {activations!r}")
    per_layer = {k: (None if v is None else resolve_scheme(v)) for k, v in (layer_schemes or {}).items()}
    act = s if activations else None
    # A forward-only recipe lets convert() apply the policy: name filters, high-precision blocks, and
    # the whole-block check on the fprop reduction dim (in-features) for both operands.
    chooser = Recipe(name=f"ptq_{s.name}_{'wa' if act else 'w'}", fprop=GemmQuant(a=act, b=s))
    before_modules = dict(model.named_modules())
    users = _tied_users(model)
    bytes_before = _model_bytes(model)
    decisions = convert(model, chooser, policy=replace(pol, backend="emulated")).layers
    linear_names = {d.name for d in decisions}
    kept_modules = _kept_modules(model, linear_names)

    layers = []
    for d in decisions:
        original = before_modules[d.name]
        w = original.weight
        if not d.converted:
            layers.append(_layer(d, w, False, d.reason, w.numel() * w.element_size()))
            continue
        shared = [u for u in users.get(id(w), []) if u != d.name]
        if shared:
            replace_module(model, d.name, original)  # undo convert()'s swap: keep the tied layer as it was
            reason = f"weight is shared with {', '.join(shared)}: quantizing it would save no memory"
            layers.append(_layer(d, w, False, reason, w.numel() * w.element_size()))
            continue
        swapped = model.get_submodule(d.name)
        assert isinstance(swapped, QuantLinear)
        ls = per_layer.get(d.name, s)
        block = ls.block[1] if ls is not None else 0
        if ls is None or (block and d.in_features % block):
            replace_module(model, d.name, original)
            reason = (
                "kept in high precision by the layer policy"
                if ls is None
                else f"in_features {d.in_features} is not a whole number of {ls.name} blocks of {block}"
            )
            layers.append(_layer(d, w, False, reason, w.numel() * w.element_size()))
            continue
        la = ls if activations else None
        q = InferenceLinear.from_linear(original, ls, act_scheme=la, quant_backend=quant_backend)
        replace_module(model, d.name, q)
        how = f"weights {ls.name}, activations " + (f"{ls.name} (dynamic)" if la else "high precision")
        layers.append(_layer(d, w, True, how, q.qweight.nbytes, ls.name))
    used = {x.scheme for x in layers if x.quantized}
    return PTQReport(
        scheme=(next(iter(used)) if len(used) == 1 else "mixed") if used else s.name,
        activations=(act.name if len(used) <= 1 else "mixed") if act is not None else None,
        layers=tuple(layers),
        kept_modules=kept_modules,
        model_bytes_before=bytes_before,
        model_bytes_after=_model_bytes(model),
    )
