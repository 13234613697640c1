"""The GPU check: is the emulation on a CUDA GPU bit-identical to the CPU, what does it cost, and how close
are the native FP8 tensor cores to it.

(a) Bit identity. For every recipe (`tenfold.engine.RECIPE_NAMES`) one emulated `QuantLinear` on fixed
    inputs (x 128x256, W 128x256, dy 128x128, fixed seeds) runs on the GPU and on the CPU (the plain
    `reference` quantization path there). The six GEMM operands (x, W, dy quantized along each GEMM's
    reduction axis: all the scaling, rounding, stochastic-rounding noise and Hadamard rotation the
    recipe does) must be equal bit for bit (`torch.equal`). The outputs y, dx, dW, db are then fp32
    GEMMs of equal operands: the line says whether they came out bit-identical too; cuBLAS and the CPU
    BLAS need not sum in the same order, so they are held to the fp32 accumulation bound (twice
    Higham's gamma_k·|A|·|B|), and `--strict` demands bit identity of them as well. Any failure makes
    the script exit 1. `--device cpu` runs the same comparison between two CPU paths (eager against
    reference), which is how the tests exercise it without a GPU.
(b) Cost. Training steps of the reference GPT (`tenfold.train`, size `small`) emulated under a few
    recipes against plain bf16 (autocast on CUDA; fp32 on a CPU, as the engine's bf16 recipe), printed as
    median step-time ratios. The first steps (kernel compilation) are left out.
(c) Native FP8. Where the GPU has FP8 tensor cores (compute capability >= 8.9), each recipe that can run
    natively (`tenfold.engine.backend.native_obstacle`) runs one layer both ways: the largest difference
    relative to the largest emulated value (native accumulates in another order and rounds its output to
    bf16 for row-wise scaling, so it is close, not identical) and the forward+backward time of native,
    emulated and a plain bf16 `nn.Linear` at 4096x4096x4096.

    python benchmarks/gpu_check.py                 # on a CUDA machine; prints a summary; < 5 min on an H200
    python benchmarks/gpu_check.py --device cpu    # part (a) and (b) between CPU paths
    python benchmarks/gpu_check.py --paths eager,compiled   # also hold the compiled GPU path bit-exact
    python benchmarks/gpu_check.py --quant-backend eager    # time the eager emulation (no compile wait)
    python benchmarks/gpu_check.py --parts none             # part (a) only

On a machine without CUDA and without `--device cpu` it prints "no CUDA device: nothing to check" and
exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tenfold.engine import RECIPE_NAMES, ConversionPolicy, QuantLinear, convert, recipe, update_scaling
from tenfold.engine.backend import native_obstacle
from tenfold.engine.operands import OPERANDS, TENSOR_INDEX
from tenfold.engine.quant import operand
from tenfold.formats.fake import QUANT_PATHS
from tenfold.formats.scheme import Scaling
from tenfold.train import GPT, MODEL_SIZES, ByteDataset, stdlib_corpus

SHAPE = (128, 256, 128)  # (tokens M, in K, out N): whole blocks for every recipe, 128x128 included
TENSORS = ("y", "dx", "dw", "db")
U = 2.0**-24  # unit roundoff of fp32


@dataclass(frozen=True, kw_only=True)
class Agreement:
    """One recipe's comparison of two emulation paths.

    Fields:
        recipe: recipe name.
        path: the path checked, e.g. "cuda/eager"; reference: the path it is held to, e.g. "cpu/reference".
        operands_mismatched: GEMM operand slots (fprop_a, ..., wgrad_b) whose quantized values differ.
        outputs_mismatched: the tensors (of TENSORS) that are not bit-identical.
        outputs_beyond_bound: the tensors that differ by more than fp32 accumulation can explain.
        max_bound_ratio: the largest |difference| / bound over the outputs (0.0 when identical).
    """

    recipe: str
    path: str
    reference: str
    operands_mismatched: tuple[str, ...]
    outputs_mismatched: tuple[str, ...]
    outputs_beyond_bound: tuple[str, ...]
    max_bound_ratio: float

    def ok(self, *, strict: bool = False) -> bool:
        """Operands bit-identical and outputs within the bound (bit-identical too when `strict`)."""
        bad_out = self.outputs_mismatched if strict else self.outputs_beyond_bound
        return not self.operands_mismatched and not bad_out

    def line(self) -> str:
        if self.operands_mismatched:
            ops = f"operands MISMATCH in {', '.join(self.operands_mismatched)}"
        else:
            ops = "operands bit-identical"
        if not self.outputs_mismatched:
            out = "outputs bit-identical"
        elif self.outputs_beyond_bound:
            out = f"outputs BEYOND the fp32 bound in {', '.join(self.outputs_beyond_bound)}"
        else:
            out = f"outputs {', '.join(self.outputs_mismatched)} differ within the fp32 accumulation bound"
        return f"{self.recipe:<20} {self.path:>16} vs {self.reference:<14} {ops}; {out}" + (
            f" (max |diff|/bound {self.max_bound_ratio:.2g})" if self.outputs_mismatched else ""
        )


def _layer(
    name: str, device: str, quant_backend: str, backend: str, shape: tuple[int, int, int]
) -> tuple[QuantLinear, torch.Tensor, torch.Tensor]:
    """A QuantLinear on `device` with fixed weights, and fixed x and dy (built on the CPU, then moved)."""
    m, k, n = shape
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(m, k, generator=g)
    w = torch.randn(n, k, generator=g) * k**-0.5
    b = torch.randn(n, generator=g) * 0.1
    dy = torch.randn(m, n, generator=g)
    layer = QuantLinear(
        k, n, recipe=recipe(name, seed=5), seed=7, backend=backend, quant_backend=quant_backend, device=device
    )
    with torch.no_grad():
        layer.weight.copy_(w)
        layer.bias.copy_(b)
    return layer, x.to(device), dy.to(device)


def layer_outputs(
    name: str,
    device: str,
    quant_backend: str,
    *,
    backend: str = "emulated",
    shape: tuple[int, int, int] = SHAPE,
) -> dict[str, torch.Tensor]:
    """y, dx, dw, db (on the CPU) of one QuantLinear forward+backward on the fixed inputs."""
    layer, x, dy = _layer(name, device, quant_backend, backend, shape)
    x.requires_grad_()
    y = layer(x)
    y.backward(dy)
    return {
        "y": y.detach().cpu(),
        "dx": x.grad.cpu(),
        "dw": layer.weight.grad.cpu(),
        "db": layer.bias.grad.cpu(),
    }


def gemm_operands(
    name: str, device: str, quant_backend: str, *, shape: tuple[int, int, int] = SHAPE
) -> dict[str, torch.Tensor]:
    """The six GEMM operands (fp32, on the CPU) the layer's first forward+backward multiplies: each
    tensor quantized per the layer's plan along its GEMM's reduction axis, stochastic-rounding offset 0
    (a fresh layer's first step), delayed scaling at its initial scale."""
    layer, x, dy = _layer(name, device, quant_backend, "emulated", shape)
    tensors = {"x": x, "w": layer.weight.detach(), "dy": dy}
    offset = torch.zeros((), dtype=torch.int64, device=device)
    out = {}
    for o in OPERANDS:
        s = getattr(layer.plan, o.slot)
        t = tensors[o.tensor]
        if s is None:
            out[o.slot] = t.to(torch.float32).cpu()
            continue
        i = TENSOR_INDEX[o.tensor]
        scale = layer.scale[i : i + 1] if s.scaling == Scaling.DELAYED else None
        out[o.slot] = operand(t, s, o.axis, scale=scale, offset=offset, backend=quant_backend).cpu()
    return out


def accumulation_bound(ops: dict[str, torch.Tensor], name: str, shape: tuple[int, int, int] = SHAPE) -> dict:
    """How far two fp32 evaluations of the layer's outputs may lie apart when their operands are equal
    and only the summation order differs: each is within gamma_k·(|A|·|B|) of the exact product, with
    gamma_k = k·u / (1 - k·u) for a length-k inner product (Higham, "Accuracy and Stability of Numerical
    Algorithms", 2nd ed., 2002, §3.1, eq. 3.5), so their difference is within twice that; the bias add
    is one more rounding (k + 1 for y)."""
    m, k, n = shape
    a = {s: v.double().abs() for s, v in ops.items()}
    layer, _, dy = _layer(name, "cpu", "reference", "emulated", shape)
    bias = layer.bias.detach().double().abs()

    def gamma(kk: int) -> float:
        return kk * U / (1 - kk * U)

    return {
        "y": 2 * gamma(k + 1) * (a["fprop_a"] @ a["fprop_b"].T + bias),
        "dx": 2 * gamma(n) * (a["dgrad_a"] @ a["dgrad_b"]),
        "dw": 2 * gamma(m) * (a["wgrad_a"].T @ a["wgrad_b"]),
        "db": 2 * gamma(m) * dy.double().abs().sum(0),
    }


def compare_paths(
    names: tuple[str, ...] | list[str],
    path: tuple[str, str],
    reference: tuple[str, str] = ("cpu", "reference"),
) -> list[Agreement]:
    """Part (a): each recipe's GEMM operands and layer outputs on `path` = (device, quant path) against
    `reference`: operands bit for bit; outputs bit for bit or within the fp32 accumulation bound."""
    rows = []
    for name in names:
        ops_got, ops_want = gemm_operands(name, *path), gemm_operands(name, *reference)
        got, want = layer_outputs(name, *path), layer_outputs(name, *reference)
        bound = accumulation_bound(ops_want, name)
        ratio = {}
        for t in TENSORS:
            diff = (got[t].double() - want[t].double()).abs().nan_to_num(float("inf"))
            ratio[t] = float((diff / bound[t].clamp_min(1e-300)).max())
        rows.append(
            Agreement(
                recipe=name,
                path="/".join(path),
                reference="/".join(reference),
                operands_mismatched=tuple(s for s in ops_want if not torch.equal(ops_got[s], ops_want[s])),
                outputs_mismatched=tuple(t for t in TENSORS if not torch.equal(got[t], want[t])),
                outputs_beyond_bound=tuple(t for t in TENSORS if ratio[t] > 1.0),
                max_bound_ratio=max(ratio.values()),
            )
        )
    return rows


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_training(
    device: str, names: list[str], *, model: str, steps: int, warmup: int, quant_backend: str
) -> dict[str, float]:
    """Part (b): median step time (s) of the reference GPT (size `model`) per recipe; "bf16" is plain
    bf16 (autocast) on CUDA and fp32 on a CPU. Steps are timed round-robin so that outside load hits
    every recipe alike."""
    cfg = MODEL_SIZES[model]
    data = ByteDataset.from_bytes(stdlib_corpus(1 << 20))
    runs = {}
    for name in names:
        torch.manual_seed(0)
        model = GPT(cfg).to(device)
        if name != "bf16":
            convert(model, name, policy=ConversionPolicy(backend="emulated", quant_backend=quant_backend))
        runs[name] = (model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    autocast = device.startswith("cuda")

    def step(name: str, i: int) -> float:
        model, opt = runs[name]
        x, y = (t.to(device) for t in data.batch("train", i, 16, cfg.seq_len, 0))
        _sync(device)
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast and name == "bf16"):
            logits = model(x)
        F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        update_scaling(model)
        _sync(device)
        return time.perf_counter() - t0

    for name in names:
        for i in range(warmup):
            step(name, i)
    times: dict[str, list[float]] = {n: [] for n in names}
    for i in range(steps):
        for name in names:
            times[name].append(step(name, warmup + i))
    return {n: statistics.median(t) for n, t in times.items()}


def native_recipes(device: str, k: int, n: int) -> list[str]:
    """The recipes that can run natively on `device` for an (n, k) layer."""
    dev = torch.device(device)
    out = []
    for name in RECIPE_NAMES:
        r = recipe(name)
        if r.quantizes and native_obstacle(r, dev, k, n) is None:
            out.append(name)
    return out


def native_agreement(name: str, device: str, shape: tuple[int, int, int] = SHAPE) -> float:
    """Part (c): max |native - emulated| / max |emulated| over y, dx, dw, db of one layer."""
    nat = layer_outputs(name, device, "eager", backend="native", shape=shape)
    emu = layer_outputs(name, device, "eager", shape=shape)
    return max(float((nat[t] - emu[t]).abs().max() / emu[t].abs().max()) for t in TENSORS)


def time_layer(layer: nn.Module, x: torch.Tensor, reps: int = 10) -> float:
    """Median seconds of one forward+backward of `layer` on `x` (3 untimed warm-up calls)."""
    dy = torch.ones_like(x[:, : layer.out_features])
    out = []
    for i in range(reps + 3):
        _sync(x.device.type)
        t0 = time.perf_counter()
        layer(x).backward(dy)
        _sync(x.device.type)
        if i >= 3:
            out.append(time.perf_counter() - t0)
    return statistics.median(out)


def native_speed(name: str, device: str, *, quant_backend: str, size: int = 4096) -> dict[str, float]:
    """Forward+backward seconds at size^3 for native, emulated (operands quantized by `quant_backend`)
    and a plain bf16 nn.Linear."""
    torch.manual_seed(0)
    x = torch.randn(size, size, device=device)
    res = {}
    for backend in ("native", "emulated"):
        layer = QuantLinear(
            size, size, recipe=recipe(name), backend=backend, quant_backend=quant_backend, device=device
        )
        res[backend] = time_layer(layer, x.clone().requires_grad_())
    plain = nn.Linear(size, size, device=device, dtype=torch.bfloat16)
    res["bf16"] = time_layer(plain, x.to(torch.bfloat16).requires_grad_())
    return res


def print_training(device: str, args: argparse.Namespace, size: str) -> None:
    """Part (b): median training-step time per recipe against plain bf16."""
    print(f"\n(b) training step of the reference GPT ({size}), emulated vs plain bf16 (median)")
    train = ["bf16", *[r for r in args.train_recipes.split(",") if r and r != "bf16"]]
    med = time_training(
        device,
        train,
        model=size,
        steps=args.steps,
        warmup=args.warmup,
        quant_backend=args.quant_backend,
    )
    for name, t in med.items():
        print(f"{name:<20} {1e3 * t:9.2f} ms/step  {t / med['bf16']:6.2f}x bf16")


def print_native(device: str, quant_backend: str) -> None:
    """Part (c): native FP8 GEMMs against the emulation, agreement and speed."""
    print("\n(c) native FP8 (torch._scaled_mm) vs emulation")
    cap = torch.cuda.get_device_capability() if device == "cuda" else None
    if cap is None or cap < (8, 9):
        why = "a CPU" if cap is None else f"SM{cap[0]}{cap[1]}"
        print(f"skipped: FP8 tensor cores need compute capability >= 8.9, this is {why}")
    else:
        for name in native_recipes(device, SHAPE[1], SHAPE[2]):
            rel = native_agreement(name, device)
            sp = native_speed(name, device, quant_backend=quant_backend)
            nat = sp["native"]
            print(
                f"{name:<20} max rel diff {rel:.2e}  fwd+bwd 4096^3: native {1e3 * nat:.2f} ms, "
                f"emulated {sp['emulated'] / nat:.2f}x native, bf16 {sp['bf16'] / nat:.2f}x native"
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="cuda (default when present) or cpu")
    ap.add_argument(
        "--paths", default="eager", help=f"quant paths to hold bit-exact, of {', '.join(QUANT_PATHS)}"
    )
    ap.add_argument("--strict", action="store_true", help="fail unless the outputs are bit-identical too")
    ap.add_argument("--recipes", default=",".join(RECIPE_NAMES), help="recipes for part (a)")
    ap.add_argument("--train-recipes", default="mxfp8,nvfp4,fp8_current", help="recipes timed in part (b)")
    ap.add_argument(
        "--quant-backend",
        default="auto",
        help="quant path of the emulation timed in (b) and (c); eager: no compile",
    )
    ap.add_argument("--model", default=None, help="part (b)'s GPT size: small on CUDA, tiny on a CPU")
    ap.add_argument("--steps", type=int, default=10, help="timed training steps per recipe in part (b)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per recipe in part (b)")
    ap.add_argument("--parts", default="bc", help="timing parts to run after (a): bc, b, c or none")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    device = args.device or ("cuda" if torch.cuda.is_available() else None)
    if device is None:
        print("no CUDA device: nothing to check")
        return 0
    if device not in ("cuda", "cpu"):
        ap.error(f"--device {device!r}: valid: cuda, cpu")
    if device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch.cuda.is_available() is False")
    if args.parts != "none" and not (args.parts and set(args.parts) <= set("bc")):
        ap.error(f"--parts {args.parts!r}: valid: bc, b, c, none")
    names = [r for r in args.recipes.split(",") if r]
    paths = [p for p in args.paths.split(",") if p]
    for bad, valid, what in ((names, RECIPE_NAMES, "--recipes"), (paths, QUANT_PATHS, "--paths")):
        unknown = [v for v in bad if v not in valid]
        if unknown:
            ap.error(f"{what}: unknown {unknown}; valid: {', '.join(valid)}")
    if device == "cpu":
        torch.set_num_threads(1)
        title = f"CPU only: {', '.join(paths)} against cpu/reference"
        paths = [p for p in paths if p != "reference"] or ["eager"]
    else:
        title = f"{torch.cuda.get_device_name()} (SM{''.join(map(str, torch.cuda.get_device_capability()))})"
    print(f"gpu_check on {title}; torch {torch.__version__}")

    print("\n(a) emulation: the six GEMM operands bit for bit, then y, dx, dw, db, per recipe")
    t0 = time.perf_counter()
    rows = [a for p in paths for a in compare_paths(names, (device, p))]
    for a in rows:
        print(a.line())
    n_bad = sum(not a.ok(strict=args.strict) for a in rows)
    n_ops = sum(not a.operands_mismatched for a in rows)
    n_out = sum(not a.outputs_mismatched for a in rows)
    took = time.perf_counter() - t0
    print(
        f"operands bit-identical in {n_ops} of {len(rows)}; outputs bit-identical in {n_out} of {len(rows)}, "
        f"within the fp32 bound in {sum(not a.outputs_beyond_bound for a in rows)} ({took:.0f} s)"
    )

    size = args.model or ("small" if device == "cuda" else "tiny")
    if size not in MODEL_SIZES:
        ap.error(f"--model {size!r}: valid: {', '.join(MODEL_SIZES)}")
    if "b" in args.parts:
        print_training(device, args, size)
    if "c" in args.parts:
        print_native(device, args.quant_backend)
    what = (
        "operand or output bit mismatches"
        if args.strict
        else "operand bit mismatches or outputs beyond the bound"
    )
    print(f"\nsummary: {'FAIL' if n_bad else 'OK'}: {n_bad} recipe/path checks of {len(rows)} with {what}")
    return 1 if n_bad else 0


if __name__ == "__main__":
    sys.exit(main())
