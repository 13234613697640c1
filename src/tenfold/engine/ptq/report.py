"""What `quantize_for_inference` reports: one `PTQLayer` per linear layer, the other modules it kept,
and the model's storage before and after (`PTQReport`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class PTQLayer:
    """What `quantize_for_inference` did with one linear layer.

    Fields:
        name: qualified module name.
        kind: Linear or Conv1D.
        in_features, out_features: the layer's shape.
        block: transformer block index parsed from the name by the policy's block pattern, or None.
        quantized: True when replaced by an InferenceLinear.
        reason: why it was quantized or kept.
        weight_numel: elements of the weight.
        weight_bytes_before: storage of the original weight.
        weight_bytes_after: storage of the weight afterwards (codes + scales when quantized).
        scheme: the weight scheme when quantized, else None.
    """

    name: str
    kind: str
    in_features: int
    out_features: int
    block: int | None
    quantized: bool
    reason: str
    weight_numel: int
    weight_bytes_before: int
    weight_bytes_after: int
    scheme: str | None = None

    @property
    def bits_per_element(self) -> float:
        """Weight storage bits per element afterwards, scales included."""
        return 8 * self.weight_bytes_after / self.weight_numel if self.weight_numel else 0.0


@dataclass(frozen=True, kw_only=True)
class KeptModule:
    """A module with parameters that is not a linear layer, left as it was.

    Fields:
        name: qualified module name.
        kind: its class name (Embedding, LayerNorm, ...).
        numel: elements of its own parameters.
        nbytes: their storage.
        reason: why it is kept.
    """

    name: str
    kind: str
    numel: int
    nbytes: int
    reason: str


@dataclass(frozen=True, kw_only=True)
class PTQReport:
    """The outcome of `quantize_for_inference`.

    Fields:
        scheme: weight scheme name.
        activations: activation scheme name, or None for weight-only.
        layers: one entry per linear layer, in module order.
        kept_modules: the other modules with parameters (embeddings, norms), all kept.
        model_bytes_before, model_bytes_after: storage of every parameter and buffer of the model
            (shared tensors counted once).
    """

    scheme: str
    activations: str | None
    layers: tuple[PTQLayer, ...]
    kept_modules: tuple[KeptModule, ...]
    model_bytes_before: int
    model_bytes_after: int

    @property
    def quantized(self) -> tuple[PTQLayer, ...]:
        return tuple(d for d in self.layers if d.quantized)

    @property
    def kept(self) -> tuple[PTQLayer, ...]:
        return tuple(d for d in self.layers if not d.quantized)

    @property
    def weight_bytes_before(self) -> int:
        """Storage of all linear weights (quantized and kept) before."""
        return sum(d.weight_bytes_before for d in self.layers)

    @property
    def weight_bytes_after(self) -> int:
        """Storage of all linear weights (quantized and kept) after."""
        return sum(d.weight_bytes_after for d in self.layers)

    @property
    def bits_per_element(self) -> float:
        """Storage bits per element of the quantized weights, scales included."""
        n = sum(d.weight_numel for d in self.quantized)
        return 8 * sum(d.weight_bytes_after for d in self.quantized) / n if n else 0.0

    @property
    def mode(self) -> str:
        return "weight-only" if self.activations is None else "weight+activation"

    def to_dict(self) -> dict[str, Any]:
        return {
            "scheme": self.scheme,
            "activations": self.activations,
            "mode": self.mode,
            "quantized": len(self.quantized),
            "kept": len(self.kept),
            "weight_bytes_before": self.weight_bytes_before,
            "weight_bytes_after": self.weight_bytes_after,
            "bits_per_element": self.bits_per_element,
            "model_bytes_before": self.model_bytes_before,
            "model_bytes_after": self.model_bytes_after,
            "layers": [{**vars(d), "bits_per_element": d.bits_per_element} for d in self.layers],
            "kept_modules": [vars(k) for k in self.kept_modules],
        }

    def summary(self) -> str:
        mb = 1e-6
        lines = [
            f"{self.scheme} ({self.mode}): {len(self.quantized)} linear layers quantized, "
            f"{len(self.kept)} kept; "
            f"linear weights {self.weight_bytes_before * mb:.2f} MB -> {self.weight_bytes_after * mb:.2f} MB "
            f"({self.bits_per_element:.3f} bits/element quantized); model "
            f"{self.model_bytes_before * mb:.2f} MB -> {self.model_bytes_after * mb:.2f} MB"
        ]
        lines += [f"  kept {d.name}: {d.reason}" for d in self.kept]
        lines += [f"  kept {k.name} ({k.kind}): {k.reason}" for k in self.kept_modules]
        return "\n".join(lines)
