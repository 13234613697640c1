"""`div`: the correctly rounded fp32 quotient, the same bits on a CPU, on a CUDA GPU and under torch.compile.

A plain fp32 `a / b` is not computed the same way everywhere, which breaks bit-exact scale factors:

* eager CUDA divides by a CPU scalar (a Python float or a 0-d CPU tensor) as a multiplication by its
  reciprocal (PyTorch `div_true_kernel_cuda`), one rounding more than the CPU's true division;
* TorchInductor on GPUs replaces a division by a constant with a multiplication by its reciprocal
  (`div_prim` in torch/_inductor/lowering.py) and emits fp32 `/` as Triton's approximate `div.full.f32`
  unless `TORCHINDUCTOR_EMULATE_DIVISION_ROUNDING=1` (`eager_numerics.division_rounding` in its config).

Found by `benchmarks/gpu_check.py` on an H200: NVFP4 operands differed from the CPU in the last bit of
the tensor decode scale `amax / 2688`. `div` computes in fp64 and rounds to fp32. For fp32 operands that
is the correctly rounded fp32 quotient: rounding twice is innocuous for division when the wider format has
at least 2p + 2 bits (53 >= 2 * 24 + 2; Figueroa, "When is double rounding innocuous?", SIGNUM 1995). A
divisor turned into a reciprocal multiplication in fp64 is off by at most about one fp64 ulp, while a
quotient of two fp32 numbers that is not an fp32 midpoint lies at least ~2^-49 (relative) from one, so the
final rounding still lands on the same fp32 value (outside the subnormal range).
"""

from __future__ import annotations

import torch


def div(a: torch.Tensor | float, b: torch.Tensor | float) -> torch.Tensor:
    """fp32 a / b, correctly rounded on every device and compiler; one of `a`, `b` must be a tensor.

    A Python float operand (e.g. a format's maximum) must be an fp32 value for the result to equal the
    fp32 division of the reference formulas; every constant this package divides by is one."""
    if isinstance(a, torch.Tensor):
        num = a.to(torch.float64)
        den = b.to(device=a.device, dtype=torch.float64) if isinstance(b, torch.Tensor) else float(b)
    elif isinstance(b, torch.Tensor):
        den = b.to(torch.float64)
        num = torch.full((), float(a), dtype=torch.float64, device=b.device)
    else:
        raise TypeError("div needs at least one tensor operand")
    return (num / den).to(torch.float32)
