"""Accumulation error of an emulated FP8 GEMM: fp32 vs a Hopper-like ~14-bit accumulator, with and without
promotion to fp32 every 128 elements of K.

DeepSeek-V3 (technical report §3.3.2, https://arxiv.org/abs/2412.19437) reports that H800 FP8 GEMMs keep
about 14 bits of the running sum, a maximum relative error of nearly 2 % at K = 4096, and that promoting
the partial sums to FP32 every 128 elements fixes it. This benchmark quantizes A (M x K) and B (N x K) to
FP8 E4M3 (per tensor with current scaling, or DeepSeek's 1x128 activation tiles and 128x128 weight blocks),
multiplies them with each accumulator model (`tenfold.engine.accumulate`) and compares with the fp64
product of the same quantized operands, so the figures are accumulation error only; the `quant` column is
the fp32-accumulated result against the fp64 product of the unquantized inputs, for scale.

Two error measures per cell, "normwise / max": ||C - C64||_F / ||C64||_F, and the largest elementwise
|C - C64| / |C64| over outputs with |C64| >= 0.1 rms(C64) (outputs near zero, where the sum cancels, are
left out; DeepSeek do not define their measure). Inputs are N(0, 1), or |N(0, 1)| with --positive.

    python benchmarks/accumulation.py [--m 64] [--n 64] [--seed 0] [--positive] [--bits 13] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import torch

from tenfold.engine.accumulate import ACCUMULATORS, AccumulatorModel, matmul
from tenfold.formats import fake_quantize, scheme

KS = (512, 1024, 4096, 8192, 16384)
PROMOTE = 128  # DeepSeek-V3's N_C


def operands(name: str) -> tuple:
    """(scheme of A, scheme of B) for one quantization: blocks along K, the reduction axis."""
    if name == "e4m3 tensor":
        s = scheme("fp8_e4m3_tensor", scaling="current")
        return s, s
    return scheme("fp8_e4m3_block1x128"), scheme("fp8_e4m3_block128x128")


def errors(c: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(normwise relative error, max elementwise relative error over outputs >= 0.1 rms)."""
    e = (c.double() - ref).abs()
    big = ref.abs() >= 0.1 * ref.pow(2).mean().sqrt()
    return (e.norm() / ref.norm()).item(), (e[big] / ref.abs()[big]).max().item()


def run(m: int, n: int, seed: int, positive: bool, model: AccumulatorModel) -> list[dict]:
    rows = []
    for quant in ("e4m3 tensor", "e4m3 1x128 x 128x128"):
        sa, sb = operands(quant)
        for k in KS:
            g = torch.Generator().manual_seed(seed)
            a, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
            if positive:
                a, b = a.abs(), b.abs()
            aq, bq = fake_quantize(a, sa), fake_quantize(b, sb)
            ref = aq.double() @ bq.double().t()
            row = {"quant": quant, "K": k}
            row["quant_err"] = errors(torch.mm(aq, bq.t()), a.double() @ b.double().t())
            row["fp32"] = errors(matmul(aq, bq.t(), "fp32"), ref)
            row["narrow_never"] = errors(matmul(aq, bq.t(), model, 0), ref)
            row[f"narrow_every_{PROMOTE}"] = errors(matmul(aq, bq.t(), model, PROMOTE), ref)
            rows.append(row)
    return rows


def cost_ratio(m: int, n: int, k: int, model: AccumulatorModel) -> float:
    """Time of the narrow-accumulator emulation over torch.mm, one (m, k) x (k, n) GEMM (median of 3)."""
    a, b = torch.randn(m, k), torch.randn(k, n)

    def median(fn) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return sorted(times)[1]

    return median(lambda: matmul(a, b, model, PROMOTE)) / median(lambda: torch.mm(a, b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--positive", action="store_true", help="|N(0,1)| inputs: no cancellation")
    ap.add_argument("--bits", type=int, default=None, help="accumulator fraction bits (default: hopper_fp8)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = ACCUMULATORS["hopper_fp8"]
    if args.bits is not None:
        model = replace(model, name=f"hopper_fp8_m{args.bits}", mantissa_bits=args.bits)
    rows = run(args.m, args.n, args.seed, args.positive, model)
    if args.json:
        print(json.dumps({"model": model.name, "mantissa_bits": model.mantissa_bits, "rows": rows}, indent=1))
        return
    dist = "|N(0,1)|" if args.positive else "N(0,1)"
    print(
        f"{args.m}x{args.n} outputs, {dist} inputs; accumulator {model.name}: {model.mantissa_bits} fraction "
        f"bits, {model.rounding}, k-step {model.k_step}; each cell: normwise / max relative error"
    )
    cols = ("quant_err", "fp32", "narrow_never", f"narrow_every_{PROMOTE}")
    heads = ("quant (fp32 acc)", "fp32 acc", f"{model.name} never", f"{model.name} /{PROMOTE}")
    print(f"{'quantization':22s} {'K':>6s} " + " ".join(f"{h:>21s}" for h in heads))
    for r in rows:
        cells = " ".join(f"{r[c][0]:>9.2e} / {r[c][1]:>9.2e}" for c in cols)
        print(f"{r['quant']:22s} {r['K']:>6d} {cells}")
    ratio = cost_ratio(256, 256, 4096, model)
    print(f"emulation cost, 256x4096x256 GEMM: {ratio:.0f}x torch.mm (fp32)")


if __name__ == "__main__":
    main()
