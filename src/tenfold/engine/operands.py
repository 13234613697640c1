"""The six GEMM operands of a linear layer, tabulated once.

A linear layer y = x·Wᵀ runs three GEMMs per training step (x: tokens × in, W: out × in, dy: tokens ×
out), each with two operands (a, b). Every operand is quantized with blocks along its GEMM's reduction
axis, given here as the axis of the 2-D tensor *as stored* (blocks along axis k of the stored matrix):

    gemm    product          reduction over    a (axis)    b (axis)
    fprop   out = x·Wᵀ       in-features       x  (1)      W  (1)
    dgrad   dx  = dy·W       out-features      dy (1)      W  (0)
    wgrad   dW  = dyᵀ·x      tokens            dy (0)      x  (0)

The table's order (fprop a, fprop b, dgrad a, ...) numbers the operand slots 0..5, which seeds each
slot's stochastic-rounding stream, so it must not change.
"""

from __future__ import annotations

from dataclasses import dataclass

GEMMS = ("fprop", "dgrad", "wgrad")
SIDES = ("a", "b")
# the three tensors; delayed-scaling state is kept per tensor (one amax history row each), as in TE
TENSORS = ("x", "w", "dy")
TENSOR_INDEX = {t: i for i, t in enumerate(TENSORS)}


@dataclass(frozen=True, kw_only=True)
class Operand:
    """One GEMM operand.

    Fields:
        gemm: fprop | dgrad | wgrad.
        side: a (left) | b (right).
        tensor: which tensor it is: x | w | dy.
        axis: the axis of the stored 2-D tensor that its blocks (the GEMM's reduction) run along.
    """

    gemm: str
    side: str
    tensor: str
    axis: int

    @property
    def slot(self) -> str:
        """The operand's field name in per-operand tables: ``<gemm>_<side>`` (e.g. ``dgrad_b``)."""
        return f"{self.gemm}_{self.side}"

    @property
    def in_forward(self) -> bool:
        """Whether its tensor exists in the forward pass (x and W do; dy only in backward)."""
        return self.tensor != "dy"


OPERANDS: tuple[Operand, ...] = (
    Operand(gemm="fprop", side="a", tensor="x", axis=1),
    Operand(gemm="fprop", side="b", tensor="w", axis=1),
    Operand(gemm="dgrad", side="a", tensor="dy", axis=1),
    Operand(gemm="dgrad", side="b", tensor="w", axis=0),
    Operand(gemm="wgrad", side="a", tensor="dy", axis=0),
    Operand(gemm="wgrad", side="b", tensor="x", axis=0),
)
# (gemm, side) -> the operand's blocked axis: lookups by key into the table above
OPERAND_AXIS = {(o.gemm, o.side): o.axis for o in OPERANDS}
