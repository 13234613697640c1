"""`QuantLinear`: a drop-in `nn.Linear` whose three GEMMs follow a low-precision recipe.

Master weights and bias stay in their own (high) precision; only GEMM operands are quantized. Every piece
of state that changes numerics is a buffer, so `state_dict()` carries it and a resumed run continues with
the same bits (the failure class of Transformer Engine issue #982):

* ``amax_history`` (3, L) and ``scale`` (3,): delayed scaling, one row per tensor (x, W, dy), TE layout
  (slot 0 is the current step; `update_scaling` rolls it at the step boundary);
* ``sr_seed`` and ``sr_step``: stochastic rounding; the noise of element i at step n is a pure function
  of (seed, n * 2^32 + i), so no generator state exists to lose;
* ``hadamard_signs``: the sign vector of the random Hadamard transform.

Amaxes are observed only while autograd is recording, and the SR step advances at the end of each
backward pass, so an evaluation pass under `torch.no_grad()` does not change the training trajectory.
(Advancing it in backward rather than forward also keeps torch.compile exact: AOTAutograd may recompute
a value derived from a buffer in the backward graph, after a forward-time mutation of that buffer.)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tenfold.engine.backend import BackendChoice, select_backend
from tenfold.engine.gemm import GemmPlan, QuantizedLinearFunction, observe_amax
from tenfold.engine.operands import OPERANDS, TENSOR_INDEX
from tenfold.engine.recipes import Recipe
from tenfold.formats import AmaxHistory, Scheme
from tenfold.formats.rounding import Rounding
from tenfold.formats.scheme import TE_HADAMARD_SIGNS


def slot_seed(module_seed: int, slot: int) -> int:
    """Seed of one operand slot (0..5, the order of `operands.OPERANDS`) of a module: distinct streams
    for every (module, operand)."""
    return module_seed * len(OPERANDS) + slot


class QuantLinear(nn.Module):
    """y = x·Wᵀ + b with the GEMMs of `recipe`; weight (out, in) as in `nn.Linear`.

    Args:
        recipe: the low-precision recipe (`tenfold.engine.recipe(name)`).
        seed: this module's stochastic-rounding seed (convert() numbers modules 0, 1, ...).
        backend: auto | emulated | native (see `select_backend`); the choice is in `backend_choice`.
        quant_backend: how emulated operands are fake-quantized: auto | eager | compiled | reference.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        recipe: Recipe,
        seed: int = 0,
        backend: str = "auto",
        quant_backend: str = "auto",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(self._weight_shape(), device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(out_features, device=device, dtype=dtype)) if bias else None
        self.reset_parameters()
        self._setup(recipe, seed, backend, quant_backend)

    def _weight_shape(self) -> tuple[int, int]:
        return (self.out_features, self.in_features)

    def _weight_out_in(self) -> torch.Tensor:
        """The weight as an (out, in) matrix."""
        return self.weight

    def reset_parameters(self) -> None:
        """nn.Linear's initialisation, and fresh quantization state (e.g. after `to_empty()`)."""
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            nn.init.uniform_(self.bias, -bound, bound)
        self.reset_quant_state()

    def reset_quant_state(self) -> None:
        """Fresh quantization state: seeds and Hadamard signs as constructed, empty amax histories."""
        if hasattr(self, "sr_step"):
            with torch.no_grad():
                self.sr_seed.fill_(self._seed)
                self.sr_step.zero_()
                self.hadamard_signs.copy_(torch.tensor(self._signs, dtype=torch.int8))
                if self.amax_history is not None:
                    self.amax_history.zero_()
                    self.scale.fill_(1.0)

    def _setup(self, recipe: Recipe, seed: int, backend: str, quant_backend: str) -> None:
        if not isinstance(recipe, Recipe):
            raise ValueError(f"recipe must be a tenfold.engine.Recipe, got {type(recipe).__name__}")
        if not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        self.recipe = recipe
        self.quant_backend = quant_backend
        dev = self.weight.device
        self.register_buffer("sr_seed", torch.tensor(seed, dtype=torch.int64, device=dev))
        self.register_buffer("sr_step", torch.zeros((), dtype=torch.int64, device=dev))
        signs = next((s.hadamard_signs for s in recipe.all_schemes() if s is not None and s.hadamard), None)
        self._seed, self._signs = seed, tuple(signs or TE_HADAMARD_SIGNS)
        self.register_buffer("hadamard_signs", torch.tensor(self._signs, dtype=torch.int8, device=dev))
        self.delayed = recipe.delayed_tensors()
        if self.delayed:
            L = recipe.amax_history_len
            self.register_buffer("amax_history", torch.zeros(3, L, dtype=torch.float32, device=dev))
            self.register_buffer("scale", torch.ones(3, dtype=torch.float32, device=dev))
        else:
            self.amax_history = None
            self.scale = None
        self.requested_backend = backend
        self._select_backend(dev)
        self.register_load_state_dict_post_hook(_rebuild_after_load)
        self.rebuild_plan()

    @classmethod
    def from_linear(
        cls,
        linear: nn.Module,
        recipe: Recipe,
        *,
        seed: int = 0,
        backend: str = "auto",
        quant_backend: str = "auto",
    ) -> QuantLinear:
        """A QuantLinear that shares `linear`'s weight and bias Parameters (optimizers keep working)."""
        m = cls.__new__(cls)
        nn.Module.__init__(m)
        m.in_features, m.out_features = cls._features_of(linear)
        m.weight = linear.weight
        m.bias = linear.bias
        m._setup(recipe, seed, backend, quant_backend)
        return m

    @staticmethod
    def _features_of(linear: nn.Module) -> tuple[int, int]:
        return linear.in_features, linear.out_features

    def _select_backend(self, device: torch.device) -> None:
        self.backend_choice: BackendChoice = select_backend(
            self.recipe,
            device,
            requested=self.requested_backend,
            in_features=self.in_features,
            out_features=self.out_features,
        )
        self._backend_device = device

    def rebuild_plan(self) -> None:
        """Resolve the operand schemes from the recipe and the buffers (seeds, Hadamard signs).

        Buffers on the meta device (deferred initialisation) hold no values; the values given at
        construction are used until real buffers are loaded."""
        if not self.sr_seed.is_meta:
            self._seed = int(self.sr_seed)
            self._signs = tuple(int(v) for v in self.hadamard_signs.tolist())
        seed, signs = self._seed, self._signs

        def resolve(i: int, s: Scheme | None) -> Scheme | None:
            if s is None:
                return None
            opts: dict[str, object] = {}
            if s.rounding == Rounding.STOCHASTIC:
                opts["seed"] = slot_seed(seed, i)
            if s.hadamard:
                opts["hadamard_signs"] = signs
            return s.with_options(**opts) if opts else s

        schemes = {o.slot: resolve(i, self.recipe.operand(o.gemm, o.side)) for i, o in enumerate(OPERANDS)}
        self.plan = GemmPlan(
            **schemes,
            quant_backend=self.quant_backend,
            native=self.backend_choice.backend == "native",
            backward_override=self.recipe.backward_override,
            accumulate=self.recipe.accumulate,
            promote_interval=self.recipe.promote_interval,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self._weight_out_in()
        if w.device != self._backend_device:  # moved since construction: choose again for this device
            self._select_backend(w.device)
            self.rebuild_plan()
        if not self.recipe.quantizes:
            return F.linear(x, w, self.bias)
        if x.shape[-1] != self.in_features:
            raise ValueError(f"expected input with last dim {self.in_features}, got shape {tuple(x.shape)}")
        if not x.is_floating_point():  # nn.Linear's RuntimeError for a non-float input, not int garbage
            raise RuntimeError(
                f"expected a floating-point input, got {x.dtype} (QuantLinear, recipe {self.recipe.name})"
            )
        x2 = x.reshape(-1, self.in_features)
        if x2.shape[0] == 0:  # e.g. an MoE expert given no tokens: nn.Linear's empty output, zero grads
            b = None if self.bias is None else self.bias.to(w.dtype)
            return F.linear(x.to(w.dtype), w, b).to(x.dtype)
        training = torch.is_grad_enabled()
        hist = self.amax_history
        if hist is not None and training:
            for t, v in (("x", x2), ("w", w)):
                if t in self.delayed:
                    observe_amax(hist, t, v)
        lead = tuple(x.shape[:-1])
        fn = QuantizedLinearFunction.apply
        return fn(x2, w, self.bias, self.scale, hist, self.sr_step, self.plan, lead)

    def update_scaling(self) -> None:
        """Step boundary for delayed scaling: new scales from the histories, then roll them (TE rules,
        implemented once in `tenfold.formats.AmaxHistory`)."""
        if self.amax_history is None:
            return
        with torch.no_grad():
            for t in self.delayed:
                i = TENSOR_INDEX[t]
                s = next(s for s in self.recipe.schemes_of(t) if s is not None)
                h = AmaxHistory(
                    length=self.recipe.amax_history_len,
                    algo=self.recipe.amax_algo,
                    margin=self.recipe.margin,
                    fp8_max=s.element.max,
                )
                h.history = self.amax_history[i].clone()
                h.scale = self.scale[i].clone()
                h.update()
                self.amax_history[i].copy_(h.history)
                self.scale[i].copy_(h.scale)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, "
            f"recipe={self.recipe.name}, backend={self.backend_choice.backend}"
        )


def _rebuild_after_load(module: QuantLinear, incompatible_keys: object) -> None:
    module.rebuild_plan()


class QuantConv1D(QuantLinear):
    """Hugging Face `Conv1D` (GPT-2 style: weight (in, out), y = x·W + b) with a recipe's GEMMs.

    The weight keeps its (in, out) shape so checkpoints load unchanged; the GEMMs see its transpose."""

    def _weight_shape(self) -> tuple[int, int]:
        return (self.in_features, self.out_features)

    def _weight_out_in(self) -> torch.Tensor:
        return self.weight.t()

    @staticmethod
    def _features_of(linear: nn.Module) -> tuple[int, int]:
        return linear.weight.shape[0], linear.weight.shape[1]
