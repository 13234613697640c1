"""The article's estimate for B200 against H100 ("4x effective compute", "3 months -> 3 weeks",
"60 % of the GPUs"), each checked on the article's own scenario (GPT-MoE-1.8T on 8,192 GPUs, the default
comparison) and stated with the variable it holds fixed.

* "4x effective compute": a per-GPU ratio; datasheet dense FP8 B200/H100 = 2.27x, 4.55x only for B200 FP4
  against H100 FP8 (NVIDIA's datasheets: https://www.nvidia.com/en-us/data-center/h100/ and the HGX B200 table
  at https://www.nvidia.com/en-us/data-center/hgx/, whose tensor figures are with sparsity: halved here).
  The model gives the per-GPU training speedup at FP8 and at NVFP4.
* "3 months -> 3 weeks": time at equal GPU count (implies 13/3 = 4.3x); the model gives 13 weeks / speedup.
* "60 % of the GPUs": GPUs at equal time (implies 1/0.6 = 1.67x); the model finds the fewest B200s that
  finish in the H100's time (compare_training with a deadline on a fine GPU ladder).
* Both at once (60 % of the GPUs and 3 weeks) would take 13/3/0.6 = 7.2x per GPU.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tenfold.cost.compare import compare_training
from tenfold.cost.workloads import default_scenario
from tenfold.perf.specs.hardware import load_hardware

WEEKS_H100 = 13.0  # "3 months"
WEEKS_B200 = 3.0
GPU_SHARE = 0.6


@dataclass(frozen=True, kw_only=True)
class ArticleCheck:
    """One statement: the per-GPU speedup it implies, what it holds fixed, and what the model gives."""

    statement: str
    implies: str
    implied_speedup: float
    held_fixed: str
    model: str
    verdict: str


@dataclass(frozen=True, kw_only=True)
class ArticleClaims:
    """The checks, with the model numbers behind them (days at the scenario's GPU count, GPUs needed for
    the H100's time)."""

    scenario: str
    num_gpus: int
    h100_days: float
    b200_days: dict
    speedup: dict
    gpus_for_equal_time: dict
    checks: tuple[ArticleCheck, ...]

    def to_dict(self) -> dict:
        return asdict(self)


def article_claims(progress=None) -> ArticleClaims:
    """Check the article's three statements on its own scenario (module docstring)."""
    workload, n = default_scenario()[0]
    h100, b200 = load_hardware("h100-sxm"), load_hardware("b200")
    base = compare_training(workload, ["h100-sxm"], num_gpus=n, precisions=("fp8",)).rows[0]
    days, speed, gpus = {}, {}, {}
    for i, p in enumerate(("fp8", "nvfp4")):
        r = compare_training(workload, ["b200"], num_gpus=n, precisions=(p,)).rows[0]
        days[p] = r.days
        speed[p] = base.days / r.days
        d = compare_training(
            workload,
            ["b200"],
            deadline_days=base.days,
            precisions=(p,),
            max_gpus=n,
            ladder_steps=(1.0, 1.25, 1.5, 1.75),
        ).rows[0]
        gpus[p] = d.num_gpus if d.feasible else None
        if progress:
            progress(i + 1, 2)
    spec8 = b200.peak("fp8") / h100.peak("fp8")
    spec4 = b200.peak("fp4") / h100.peak("fp8")

    def share(p: str) -> str:
        g = gpus[p]
        return f"{g:,} GPUs ({g / n:.0%})" if g else f"more than {n:,} GPUs"

    checks = (
        ArticleCheck(
            statement="B200 gives 4x the effective compute of H100",
            implies="4.0x per GPU",
            implied_speedup=4.0,
            held_fixed="nothing (a per-GPU ratio)",
            model=f"datasheet {spec8:.2f}x (dense FP8) or {spec4:.2f}x (B200 FP4 vs H100 FP8); model "
            f"{speed['fp8']:.2f}x at FP8, {speed['nvfp4']:.2f}x at NVFP4",
            verdict=f"about 4x only with FP4 training on B200; FP8 on both gives {speed['fp8']:.1f}x",
        ),
        ArticleCheck(
            statement="a 3-month run takes 3 weeks",
            implies=f"{WEEKS_H100 / WEEKS_B200:.2f}x at equal GPU count",
            implied_speedup=WEEKS_H100 / WEEKS_B200,
            held_fixed=f"GPU count ({n:,} GPUs)",
            model=f"13 weeks on H100 -> {WEEKS_H100 / speed['fp8']:.1f} weeks (FP8) or "
            f"{WEEKS_H100 / speed['nvfp4']:.1f} weeks (NVFP4); here H100 {base.days:.0f} days -> "
            f"{days['fp8']:.0f} / {days['nvfp4']:.0f} days",
            verdict=f"optimistic by {WEEKS_H100 / speed['fp8'] / WEEKS_B200:.1f}x at FP8, "
            f"{WEEKS_H100 / speed['nvfp4'] / WEEKS_B200:.1f}x at NVFP4",
        ),
        ArticleCheck(
            statement="with 60 % of the GPUs",
            implies=f"{1 / GPU_SHARE:.2f}x at equal time",
            implied_speedup=1 / GPU_SHARE,
            held_fixed=f"time (the H100 run's {base.days:.0f} days)",
            model=f"B200 needs {share('fp8')} at FP8, {share('nvfp4')} at NVFP4 (GPU counts on a 1, "
            "1.25, 1.5, 1.75 x 2^k ladder)",
            verdict="conservative: the model needs fewer than 60 % of the GPUs"
            if gpus["fp8"] and gpus["fp8"] <= GPU_SHARE * n
            else "optimistic at FP8",
        ),
        ArticleCheck(
            statement="3 weeks and 60 % of the GPUs together",
            implies=f"{WEEKS_H100 / WEEKS_B200 / GPU_SHARE:.1f}x per GPU",
            implied_speedup=WEEKS_H100 / WEEKS_B200 / GPU_SHARE,
            held_fixed="neither: both change at once",
            model=f"model {speed['fp8']:.2f}x (FP8) / {speed['nvfp4']:.2f}x (NVFP4) per GPU",
            verdict="inconsistent with the article's own 4x: state which of time or GPU count is held fixed",
        ),
    )
    return ArticleClaims(
        scenario=f"{workload.label}: {workload.tokens / 1e12:g}T tokens on {n:,} GPUs ({workload.source})",
        num_gpus=n,
        h100_days=base.days,
        b200_days=days,
        speedup=speed,
        gpus_for_equal_time=gpus,
        checks=checks,
    )
