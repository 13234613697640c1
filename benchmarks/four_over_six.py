"""NVFP4 error: plain, "Four Over Six" (MAE and MSE selection) and row-scaled, on real-like tensors.

Four Over Six: Cook et al., arXiv 2512.02010 (https://arxiv.org/abs/2512.02010), as in Transformer
Engine 2.15+ (`nvfp4_4over6`, global E4M3 bound 256); row scaling: TE `row_scaled_activation`.
Prints, per tensor, the relative MSE (sum (q - x)^2 / sum x^2) and relative MAE (sum |q - x| / sum |x|)
of each variant, and the share of 16-element blocks where map-to-4 won. Single-threaded and small:

    PYTHONPATH=src python benchmarks/four_over_six.py [--rows 512] [--cols 2048]
"""

from __future__ import annotations

import argparse

import torch

from tenfold.formats import Scheme, fake_quantize, four_over_six, nvfp4, scheme
from tenfold.formats.blocking import tiles, to_working

VARIANTS: dict[str, dict] = {
    "nvfp4": {},
    "4over6 mae": {"four_over_six": "mae"},
    "4over6 mse": {"four_over_six": "mse"},
    "row": {"row_scaled": True},
    "row+4o6 mse": {"row_scaled": True, "four_over_six": "mse"},
}


def tensors(rows: int, cols: int, seed: int = 0) -> dict[str, tuple[torch.Tensor, str]]:
    """name -> (bf16 tensor, base scheme name)."""
    g = torch.Generator().manual_seed(seed)
    gauss = torch.randn(rows, cols, generator=g)
    chi2 = torch.distributions.Chi2(torch.tensor(3.0)).sample((rows, cols))
    student = torch.randn(rows, cols, generator=g) / torch.sqrt(chi2 / 3.0)
    acts = torch.randn(rows, cols, generator=g)
    outlier_ch = torch.randperm(cols, generator=g)[: max(1, cols // 100)]
    acts[:, outlier_ch] *= 50.0  # 1 % of the channels 50x larger (LLM.int8()-style outlier features)
    acts[torch.randperm(rows, generator=g)[: rows // 16]] *= 8.0  # and some loud tokens
    torch.manual_seed(seed)
    w = torch.nn.Linear(cols, rows, bias=False).weight.detach().clone()  # Kaiming-uniform init
    idx = torch.randint(0, w.numel(), (w.numel() // 1000,), generator=g)
    w.view(-1)[idx] *= 20.0  # 0.1 % outlier weights
    return {
        "gaussian": (gauss, "nvfp4"),
        "student-t(3)": (student, "nvfp4"),
        "acts+outlier ch": (acts, "nvfp4"),
        "weights 1x16": (w, "nvfp4"),
        "weights 16x16": (w, "nvfp4_2d"),
    }


def map4_share(x: torch.Tensor, s: Scheme) -> float:
    """Fraction of blocks where the map-to-4 candidate won."""
    xw = to_working(x, s)
    amax = nvfp4.tensor_amax(xw, s)
    bound = nvfp4.global_e4m3_max(s)
    g_enc = nvfp4.global_encode_scale(amax, bound)
    _, _, pick4 = four_over_six.choose(tiles(xw, s), amax, g_enc, s, bound, fast=False)
    return pick4.float().mean().item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--cols", type=int, default=2048)
    args = ap.parse_args()
    torch.set_num_threads(1)
    names = list(VARIANTS)
    print(
        f"relative MSE / relative MAE, {args.rows}x{args.cols} bf16 tensors; map4 = share of blocks picking 4"
    )
    print(f"{'tensor':<16}" + "".join(f"{n:>20}" for n in names) + f"{'map4 mae':>10}{'map4 mse':>10}")
    for label, (x, base) in tensors(args.rows, args.cols).items():
        x = x.to(torch.bfloat16)
        xf = x.float()
        cells = []
        for opts in VARIANTS.values():
            if base == "nvfp4_2d" and opts.get("row_scaled"):
                cells.append(f"{'-':>20}")
                continue
            d = fake_quantize(x, scheme(base, **opts), backend="eager").float() - xf
            mse = (d * d).sum().item() / (xf * xf).sum().item()
            mae = d.abs().sum().item() / xf.abs().sum().item()
            cells.append(f"{mse:>10.3e} / {mae:.4f}")
        shares = [map4_share(xf, scheme(base, four_over_six=m)) for m in ("mae", "mse")]
        print(f"{label:<16}" + "".join(cells) + "".join(f"{v:>10.3f}" for v in shares))


if __name__ == "__main__":
    main()
