"""Training recipes: for each of a linear layer's three GEMMs, how each operand is quantized.

The three GEMMs (fprop, dgrad, wgrad) and their operands (a, b) are tabulated in `operands.py`.
A recipe gives a `Scheme` (or None: high precision) per operand. Blocks always run along the GEMM's
reduction axis; the engine places them there, so recipe schemes keep the default `axis=-1`. Recipes are
named code: one registry dict filled by the `register` decorator; `recipe(name, **overrides)` builds one.
Sources per recipe are cited in each builder's docstring. TE's recipes are the classes of
transformer_engine/common/recipe/__init__.py (https://github.com/NVIDIA/TransformerEngine); torchao's are
`torchao.float8.Float8LinearConfig.from_recipe_name` (https://github.com/pytorch/ao).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from tenfold.engine.accumulate import accumulator, check_promote_interval
from tenfold.engine.operands import GEMMS, OPERANDS, SIDES, TENSORS
from tenfold.formats import AmaxAlgo, Scaling, Scheme, scheme

# Recipe.backward_override values besides None (TE recipe field `backward_override`)
BACKWARD_OVERRIDES = ("high_precision", "dequantized")


@dataclass(frozen=True, kw_only=True)
class GemmQuant:
    """Quantization of one GEMM's two operands (a, b), each along the reduction axis; None = high precision.

    Fields:
        a: scheme of the left operand (x in fprop, dy in dgrad and wgrad).
        b: scheme of the right operand (W in fprop and dgrad, x in wgrad).
    """

    a: Scheme | None = None
    b: Scheme | None = None

    def __post_init__(self) -> None:
        for side in SIDES:
            s = getattr(self, side)
            if s is not None and not isinstance(s, Scheme):
                raise ValueError(f"operand {side} must be a tenfold.formats.Scheme or None, got {s!r}")
            if s is not None and s.axis != -1:
                raise ValueError(
                    f"operand {side} ({s.name}) has axis={s.axis}; recipes leave axis at -1 and the engine "
                    "places blocks along each GEMM's reduction axis"
                )
        ha = self.a is not None and self.a.hadamard
        hb = self.b is not None and self.b.hadamard
        if ha != hb:
            raise ValueError(
                "the Hadamard transform must rotate both operands of a GEMM (it cancels only in pairs): "
                f"a.hadamard={ha}, b.hadamard={hb}"
            )
        if ha and self.a.hadamard_signs != self.b.hadamard_signs:  # type: ignore[union-attr]
            raise ValueError("both operands of a rotated GEMM must use the same Hadamard sign vector")

    @property
    def quantized(self) -> bool:
        return self.a is not None or self.b is not None


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """A named low-precision training recipe.

    Fields:
        name: registry name.
        description: one line: what it is and where it comes from.
        fprop, dgrad, wgrad: operand quantization of the three GEMMs (see module docstring).
        amax_history_len: delayed scaling: amax history window in steps (TE default 1024).
        amax_algo: delayed scaling: `max` over the window or `most_recent`.
        margin: delayed scaling: scale = (fp8_max / amax) / 2^margin.
        reduce_amax: delayed scaling: all-reduce (MAX) the step's amaxes across ranks before updating.
        hp_tail: fraction of transformer blocks, counted from the last, whose linears stay high precision:
            ceil(hp_tail * n_blocks) blocks (NVFP4 recipe; see `nvfp4`).
        seed: base seed of the per-module stochastic-rounding streams.
        backward_override: None: dgrad and wgrad quantize as their GemmQuant says; "high_precision": both
            backward GEMMs multiply the original x, W and dy; "dequantized": they multiply x and W as the
            fprop GEMM quantized them (its dequantized values, along the fprop axis) and the original dy.
            Transformer Engine's recipe field of that name (NVIDIA/TransformerEngine pull requests 2644
            and 3141). It applies to any recipe; `operand` returns the resolved backward operands.
        accumulate: the emulated GEMMs' accumulator, a name in `accumulate.ACCUMULATORS`: fp32 (exact
            torch.mm) | hopper_fp8 (~14-bit truncating accumulator, DeepSeek-V3 §3.3.2). The native path
            runs on real tensor cores and ignores it.
        promote_interval: K elements between promotions of the narrow accumulator into an fp32 total
            (128: DeepSeek-V3's N_C; 0 or None: never); a multiple of the model's k_step. Unused by fp32.
    """

    name: str
    description: str = ""
    fprop: GemmQuant = GemmQuant()
    dgrad: GemmQuant = GemmQuant()
    wgrad: GemmQuant = GemmQuant()
    amax_history_len: int = 1024
    amax_algo: AmaxAlgo = AmaxAlgo.MAX
    margin: int = 0
    reduce_amax: bool = True
    hp_tail: float = 0.0
    seed: int = 0
    backward_override: str | None = None
    accumulate: str = "fp32"
    promote_interval: int | None = 128

    def __post_init__(self) -> None:
        for g in GEMMS:
            if not isinstance(getattr(self, g), GemmQuant):
                raise ValueError(f"{self.name}: {g} must be a GemmQuant, got {getattr(self, g)!r}")
        try:
            object.__setattr__(self, "amax_algo", AmaxAlgo(self.amax_algo))
        except ValueError:
            raise ValueError(
                f"{self.name}: amax_algo={self.amax_algo!r} is not one of: max, most_recent"
            ) from None
        if self.amax_history_len < 1:
            raise ValueError(f"{self.name}: amax_history_len must be >= 1, got {self.amax_history_len}")
        if self.margin < 0:
            raise ValueError(f"{self.name}: margin must be >= 0, got {self.margin}")
        if not 0.0 <= self.hp_tail <= 1.0:
            raise ValueError(f"{self.name}: hp_tail must be in [0, 1], got {self.hp_tail}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"{self.name}: seed must be a non-negative int, got {self.seed!r}")
        if self.backward_override is not None and self.backward_override not in BACKWARD_OVERRIDES:
            raise ValueError(
                f"{self.name}: backward_override={self.backward_override!r} is not one of: "
                f"None, {', '.join(BACKWARD_OVERRIDES)}"
            )
        if self.backward_override == "dequantized" and any(
            s is not None and s.hadamard for s in (self.fprop.a, self.fprop.b)
        ):
            raise ValueError(
                f"{self.name}: backward_override='dequantized' reuses the fprop operands, which must not be "
                "Hadamard-rotated (the rotation cancels only inside the fprop GEMM)"
            )
        try:
            model = accumulator(self.accumulate)
            object.__setattr__(self, "promote_interval", check_promote_interval(model, self.promote_interval))
        except ValueError as e:
            raise ValueError(f"{self.name}: {e}") from None
        for t in TENSORS:
            uses = [s for s in self.schemes_of(t) if s is not None]
            delayed = [s for s in uses if s.scaling == Scaling.DELAYED]
            if delayed and any(s != delayed[0] for s in uses):
                raise ValueError(
                    f"{self.name}: tensor {t} uses delayed scaling, so every GEMM that quantizes it must use "
                    f"the same per-tensor scheme (one amax history per tensor, as in TE); got "
                    f"{sorted({s.name for s in uses})}"
                )

    def operand(self, gemm: str, side: str) -> Scheme | None:
        """The scheme that quantizes one operand, after `backward_override` (which leaves the backward
        GEMMs no scheme of their own: high precision, or the fprop operands' values for "dequantized")."""
        if self.backward_override is not None and gemm != "fprop":
            return None
        return getattr(getattr(self, gemm), side)

    def schemes_of(self, tensor: str) -> list[Scheme | None]:
        """The schemes that quantize one tensor (x, w or dy) across the three GEMMs."""
        return [self.operand(o.gemm, o.side) for o in OPERANDS if o.tensor == tensor]

    @property
    def quantizes(self) -> bool:
        """False for a high-precision recipe (nothing to convert)."""
        return any(self.operand(o.gemm, o.side) is not None for o in OPERANDS)

    def delayed_tensors(self) -> tuple[str, ...]:
        """Tensors (x, w, dy) whose scale comes from an amax history."""
        return tuple(
            t
            for t in TENSORS
            if any(s is not None and s.scaling == Scaling.DELAYED for s in self.schemes_of(t))
        )

    @property
    def uses_stochastic_rounding(self) -> bool:
        return any(s is not None and s.rounding.value == "stochastic" for s in self.all_schemes())

    def all_schemes(self) -> list[Scheme | None]:
        """The six operand schemes in the table order of `operands.OPERANDS` (slots 0..5)."""
        return [self.operand(o.gemm, o.side) for o in OPERANDS]

    def describe(self) -> dict[str, Any]:
        """Plain-data view (for --json, reports and logs)."""

        def one(s: Scheme | None) -> str:
            if s is None:
                return "high precision"
            opts = [f"scale={s.scale_mode.value}"] if s.family.value == "mx" else []
            opts += [s.scaling.value] if s.family.value == "tensor" else []
            opts += ["SR"] if s.rounding.value == "stochastic" else []
            opts += ["RHT"] if s.hadamard else []
            opts += [f"4over6 {s.four_over_six}"] if s.four_over_six else []
            opts += ["row-scaled"] if s.row_scaled else []
            return s.name + (f" ({', '.join(opts)})" if opts else "")

        def shown(gemm: str, side: str) -> str:
            if self.backward_override == "dequantized" and gemm != "fprop" and side == "b":
                w = gemm == "dgrad"  # dgrad's b is W, wgrad's b is x
                return f"fprop-quantized {'W' if w else 'x'}: " + one(self.fprop.b if w else self.fprop.a)
            return one(self.operand(gemm, side))

        return {
            "name": self.name,
            "description": self.description,
            **{g: {"a": shown(g, "a"), "b": shown(g, "b")} for g in GEMMS},
            "hp_tail": self.hp_tail,
            "backward_override": self.backward_override,
            "accumulate": self.describe_accumulate(),
        }

    def describe_accumulate(self) -> str:
        """The accumulator in words, e.g. ``hopper_fp8 (promoted to fp32 every 128)``."""
        if accumulator(self.accumulate).exact:
            return self.accumulate
        if not self.promote_interval:
            return f"{self.accumulate} (never promoted)"
        return f"{self.accumulate} (promoted to fp32 every {self.promote_interval})"


_RECIPES: dict[str, Callable[[], Recipe]] = {}


def register(name: str) -> Callable[[Callable[[], Recipe]], Callable[[], Recipe]]:
    """Decorator: add a recipe builder to the registry under `name`."""

    def deco(fn: Callable[[], Recipe]) -> Callable[[], Recipe]:
        if name in _RECIPES:
            raise ValueError(f"recipe {name!r} is already registered")
        _RECIPES[name] = fn
        return fn

    return deco


def recipe(name: str, **overrides: Any) -> Recipe:
    """Build the named recipe, optionally replacing fields (e.g. ``recipe("nvfp4", hp_tail=0.25)``)."""
    if not isinstance(name, str) or name not in _RECIPES:
        raise ValueError(f"unknown recipe {name!r}; valid: {', '.join(_RECIPES)}")
    valid = {f.name for f in fields(Recipe)} - {"name"}
    unknown = sorted(set(overrides) - valid)
    if unknown:
        raise ValueError(f"unknown recipe field(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
    r = _RECIPES[name]()
    return replace(r, **overrides) if overrides else r


def same_everywhere(s: Scheme | None, description: str, name: str, **extra: Any) -> Recipe:
    return Recipe(
        name=name,
        description=description,
        fprop=GemmQuant(a=s, b=s),
        dgrad=GemmQuant(a=s, b=s),
        wgrad=GemmQuant(a=s, b=s),
        **extra,
    )


def weights_apart(act: Scheme, w: Scheme, description: str, name: str) -> Recipe:
    """One scheme for the weight (fprop and dgrad) and another for activations and gradients everywhere
    else: the shape of the recipes whose weights take 2-D blocks."""
    return Recipe(
        name=name,
        description=description,
        fprop=GemmQuant(a=act, b=w),
        dgrad=GemmQuant(a=act, b=w),
        wgrad=GemmQuant(a=act, b=act),
    )


@register("bf16")
def _bf16() -> Recipe:
    """High-precision baseline: no quantization (computed in fp32 where bf16 matmul is slow, e.g. CPU)."""
    return same_everywhere(None, "high-precision baseline (fp32 arithmetic)", "bf16")


def _fp8_tensor(name: str, scaling: str, description: str) -> Recipe:
    fwd = scheme("fp8_e4m3_tensor", scaling=scaling)
    bwd = scheme("fp8_e5m2_tensor", scaling=scaling)
    return Recipe(
        name=name,
        description=description,
        fprop=GemmQuant(a=fwd, b=fwd),
        dgrad=GemmQuant(a=bwd, b=fwd),
        wgrad=GemmQuant(a=bwd, b=fwd),
    )


@register("fp8_delayed")
def _fp8_delayed() -> Recipe:
    """TE `DelayedScaling` (HYBRID format): E4M3 x and W, E5M2 gradients, per-tensor scales from a
    1024-step amax history with `max`, margin 0, amax all-reduced across ranks."""
    return _fp8_tensor(
        "fp8_delayed", "delayed", "TE DelayedScaling: E4M3 fwd / E5M2 grads, amax history 1024"
    )


@register("fp8_current")
def _fp8_current() -> Recipe:
    """TE `Float8CurrentScaling` (HYBRID): per-tensor scales from each tensor's own amax."""
    return _fp8_tensor("fp8_current", "current", "TE Float8CurrentScaling: E4M3 fwd / E5M2 grads, per tensor")


@register("fp8_rowwise")
def _fp8_rowwise() -> Recipe:
    """torchao `Float8LinearConfig.from_recipe_name("rowwise")`: E4M3 everywhere, one power-of-two scale
    per row of each operand along the reduction axis ("axiswise")."""
    return same_everywhere(scheme("fp8_e4m3_row"), "torchao rowwise: E4M3, pow2 scale per row", "fp8_rowwise")


@register("fp8_block")
def _fp8_block() -> Recipe:
    """DeepSeek-V3 technical report §3.3 (https://arxiv.org/abs/2412.19437) / TE `Float8BlockScaling`:
    E4M3 everywhere; 1x128 tiles for activations and gradients (128x1 along tokens in wgrad), 128x128
    blocks for weights; power-of-two scales (TE default)."""
    return weights_apart(
        scheme("fp8_e4m3_block1x128"),
        scheme("fp8_e4m3_block128x128"),
        "DeepSeek-V3 FP8: 1x128 activations/grads, 128x128 weights",
        "fp8_block",
    )


@register("mxfp8")
def _mxfp8() -> Recipe:
    """TE `MXFP8BlockScaling` / Mishra et al. 2025, "Recipes for pre-training LLMs with MXFP8"
    (https://arxiv.org/abs/2506.08027): MXFP8 E4M3 for all operands (also gradients: E5M2 gradients
    diverge, github.com/NVIDIA-NeMo/Megatron-Bridge pull request 638), round-up (RCEIL) E8M0 scales."""
    s = scheme("mxfp8_e4m3", scale_mode="rceil")
    return same_everywhere(s, "MXFP8 E4M3 everywhere, RCEIL scales (TE/cuBLAS)", "mxfp8")


@register("mxfp8_floor")
def _mxfp8_floor() -> Recipe:
    """MXFP8 E4M3 everywhere with the OCP MX v1.0 FLOOR scale rule (clips up to 12.5 % of a block max)."""
    s = scheme("mxfp8_e4m3", scale_mode="floor")
    return same_everywhere(s, "MXFP8 E4M3 everywhere, OCP FLOOR scales", "mxfp8_floor")


_NVFP4_DESCRIPTIONS = {
    "nvfp4": "NVIDIA NVFP4: 1x16 act/grad, 16x16 W, RHT on wgrad, SR grads, HP tail",
    "nvfp4_no_rht": "nvfp4 without the Hadamard transform on wgrad",
    "nvfp4_no_sr": "nvfp4 with round-to-nearest gradients",
    "nvfp4_no_2d": "nvfp4 with 1x16 weight blocks",
    "nvfp4_no_hp_layers": "nvfp4 with every block in NVFP4",
    "nvfp4_4over6": "nvfp4 with 4over6 (MAE) weights and activations, no RHT (TE nvfp4_4over6=all)",
    "nvfp4_4over6_weights": "nvfp4 with 4over6 (MAE) weights (TE nvfp4_4over6=weights)",
    "nvfp4_4over6_activations": "nvfp4 with 4over6 (MAE) activations, no RHT (TE nvfp4_4over6=activations)",
    "nvfp4_row_scaled": "nvfp4 with one global scale per activation row (TE row_scaled_activation)",
}


def _nvfp4(
    name: str,
    *,
    rht: bool = True,
    sr: bool = True,
    two_d: bool = True,
    hp: bool = True,
    four_over_six: str = "none",
    row_scaled: bool = False,
) -> Recipe:
    """NVIDIA's NVFP4 recipe (NVIDIA, "Pretraining Large Language Models with NVFP4", arXiv 2509.25149 §4,
    https://arxiv.org/abs/2509.25149; TE `NVFP4BlockScaling`): 1x16 activations and gradients, 2-D 16x16
    weight blocks (the same codes for W and Wᵀ), a 16-point random Hadamard transform on the wgrad GEMM's
    inputs only, stochastic rounding on gradients, round-to-nearest elsewhere, and the last blocks in high
    precision. NVIDIA's blog post of 2026-02-23 on Llama3-8B keeps the last 4 of 32 layers in BF16, hence
    hp_tail = 0.125 (the paper keeps ~15 % of linears):
    https://developer.nvidia.com/blog/using-nvfp4-low-precision-model-training-for-higher-throughput-without-losing-accuracy/

    TE 2.15+ options of `NVFP4BlockScaling` (transformer_engine/common/recipe/__init__.py and
    pytorch/quantization.py): `four_over_six` is the scope of `nvfp4_4over6` (none | weights | activations
    | all; gradients never), with TE's defaults MAE selection and the 256 global bound; TE rejects 4over6
    on a quantizer with RHT, and x's quantizer rotates its wgrad copy, so the scopes with activations
    need RHT off. `row_scaled` is `row_scaled_activation`: x (forward activations) gets one amax per row
    along the reduction axis, in fprop and in wgrad.
    """
    acts_46 = four_over_six in ("activations", "all")
    w_46 = four_over_six in ("weights", "all")
    if acts_46 and rht:
        raise ValueError(f"{name}: 4over6 on activations needs rht=False (TE: 4over6 does not support RHT)")
    act = scheme("nvfp4", four_over_six="mae" if acts_46 else None)
    act_x = act.with_options(row_scaled=row_scaled)
    w = scheme("nvfp4_2d") if two_d else scheme("nvfp4")
    w = w.with_options(four_over_six="mae") if w_46 else w
    grad = scheme("nvfp4", rounding="stochastic") if sr else scheme("nvfp4")
    return Recipe(
        name=name,
        description=_NVFP4_DESCRIPTIONS[name],
        fprop=GemmQuant(a=act_x, b=w),
        dgrad=GemmQuant(a=grad, b=w),
        wgrad=GemmQuant(
            a=grad.with_options(hadamard=True) if rht else grad,
            b=act_x.with_options(hadamard=True) if rht else act_x,
        ),
        hp_tail=0.125 if hp else 0.0,
    )


@register("nvfp4")
def _nvfp4_full() -> Recipe:
    return _nvfp4("nvfp4")


@register("nvfp4_no_rht")
def _nvfp4_no_rht() -> Recipe:
    return _nvfp4("nvfp4_no_rht", rht=False)


@register("nvfp4_no_sr")
def _nvfp4_no_sr() -> Recipe:
    return _nvfp4("nvfp4_no_sr", sr=False)


@register("nvfp4_no_2d")
def _nvfp4_no_2d() -> Recipe:
    return _nvfp4("nvfp4_no_2d", two_d=False)


@register("nvfp4_no_hp_layers")
def _nvfp4_no_hp_layers() -> Recipe:
    return _nvfp4("nvfp4_no_hp_layers", hp=False)


@register("nvfp4_4over6")
def _nvfp4_4over6() -> Recipe:
    return _nvfp4("nvfp4_4over6", rht=False, four_over_six="all")


@register("nvfp4_4over6_weights")
def _nvfp4_4over6_weights() -> Recipe:
    return _nvfp4("nvfp4_4over6_weights", four_over_six="weights")


@register("nvfp4_4over6_activations")
def _nvfp4_4over6_activations() -> Recipe:
    return _nvfp4("nvfp4_4over6_activations", rht=False, four_over_six="activations")


@register("nvfp4_row_scaled")
def _nvfp4_row_scaled() -> Recipe:
    return _nvfp4("nvfp4_row_scaled", row_scaled=True)


@register("mxfp4")
def _mxfp4() -> Recipe:
    """Naive MXFP4: MX E2M1 everywhere, OCP FLOOR scales, round-to-nearest, no transform, no HP layers."""
    return same_everywhere(scheme("mxfp4"), "naive MXFP4: E2M1 everywhere, FLOOR scales", "mxfp4")


@register("mxfp8_2d")
def _mxfp8_2d() -> Recipe:
    """`mxfp8` with one E8M0 scale per 32x32 weight tile, so W (fprop) and Wᵀ (dgrad) share codes: TE v2.19
    `MXFP8BlockScaling(enable_2d_quantization=True)` (NVIDIA/TransformerEngine pull request 2634; only the
    weight quantizer turns 2-D, inputs and gradients keep 1x32 blocks)."""
    return weights_apart(
        scheme("mxfp8_e4m3", scale_mode="rceil"),
        scheme("mxfp8_e4m3_2d", scale_mode="rceil"),
        "MXFP8 E4M3, RCEIL scales, 32x32 weight blocks (TE enable_2d_quantization)",
        "mxfp8_2d",
    )


RECIPE_NAMES: tuple[str, ...] = tuple(_RECIPES)
