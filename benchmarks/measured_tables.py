"""Measured kernel tables against the fitted calibration, side by side (prints; never asserts).

1. For every shipped training validation row (`tenfold.perf.validation.training.load_cases()`): the
   fitted GEMM efficiency the model uses for that GPU and precision (`load_calibration().gemm(arch, bits)`)
   next to the measured-table efficiency of the row's own layer GEMMs (forward, dgrad, wgrad; FLOP-weighted,
   `tenfold.perf.measured.layer_gemm_efficiency`) at its first candidate layout's TP, EP and tokens per
   micro-batch (micro_batch x seq_len / cp).
2. Per (architecture, bits class): the median measured efficiency over those rows against the fitted value.
3. NCCL all-reduce and all-gather bus bandwidth at a 1 GiB message on 8 GPUs (4 on GB200/GB300, whose
   tables stop there) against what the model assumes: `scaleup_efficiency` x the catalog's scale-up bandwidth.

Needs the optional `measured` extra (aiconfigurator-core, pyarrow); says so and exits otherwise.
The fitted efficiency also absorbs what the model leaves out (clock throttling under power caps, overlap
with communication, padding to 128-row tiles is modelled separately), so the two are not expected to agree
exactly: the comparison shows where the fit departs from silicon and by how much.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from tenfold.perf.calibration import load_calibration
from tenfold.perf.measured import available, collective_bus_bandwidth, layer_gemm_efficiency
from tenfold.perf.measured.tables import gemm_dtype, gemm_system
from tenfold.perf.specs.hardware import load_hardware
from tenfold.perf.validation.training import load_cases

MESSAGE_BYTES = 2**30
NCCL_GPUS = ("a100-80gb", "h100-sxm", "h200", "b200", "gb200", "b300", "gb300")


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def gemm_rows() -> dict[tuple[str, str], list[tuple[float, float]]]:
    cal = load_calibration()
    groups: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    print("1. Layer GEMM efficiency per validation row (fitted calibration vs measured tables)")
    head = f"{'row':<34} {'gpu':<10} {'prec':<6} {'model':<22} {'TP':>3} {'EP':>3} {'tokens':>7}"
    print(f"{head} {'table':<18} {'fitted':>6} {'measured':>8} {'ratio':>6}")
    for case in load_cases():
        if case.reason:
            print(f"{case.id:<34} skipped: {case.reason}")
            continue
        lay, hw, prec = case.candidates[0], case.hardware, case.precision
        tokens = lay.micro_batch * case.seq_len / lay.cp
        fitted = cal.gemm(hw.arch, prec.bits_class)
        measured = layer_gemm_efficiency(case.gpu, prec.name, case.model, tp=lay.tp, tokens=tokens, ep=lay.ep)
        system = gemm_system(case.gpu)
        table = f"{system}/{gemm_dtype(system, prec.name)}" if system else "-"
        ratio = measured / fitted if measured is not None else None
        print(
            f"{case.id[:34]:<34} {case.gpu:<10} {prec.name:<6} {case.model_name[:22]:<22} {lay.tp:>3} "
            f"{lay.ep:>3} {tokens:>7.0f} {table:<18} {fitted:>6.3f} {_fmt(measured):>8} "
            f"{_fmt(ratio, '.2f'):>6}"
        )
        if measured is not None:
            groups[(hw.arch, prec.bits_class)].append((fitted, measured))
    return groups


def summary(groups: dict[tuple[str, str], list[tuple[float, float]]]) -> None:
    print("\n2. Per architecture and bits class: median measured efficiency at the rows' shapes vs fitted")
    print(f"{'key':<20} {'rows':>4} {'fitted':>7} {'median measured':>16} {'range':>13} {'ratio':>6}")
    for (arch, bits), pairs in sorted(groups.items()):
        fitted = pairs[0][0]
        meas = [m for _, m in pairs]
        med = statistics.median(meas)
        rng = f"{min(meas):.3f}-{max(meas):.3f}"
        key = f"{arch}/{bits}"
        print(f"{key:<20} {len(pairs):>4} {fitted:>7.3f} {med:>16.3f} {rng:>13} {med / fitted:>6.2f}")


def nccl() -> None:
    cal = load_calibration()
    print(f"\n3. NCCL bus bandwidth at {MESSAGE_BYTES / 2**30:.0f} GiB (GB/s) vs the model's scale-up rate")
    print(
        f"{'gpu':<10} {'GPUs':>4} {'all_reduce':>10} {'all_gather':>10} "
        f"{'model: eff x link':>18} {'AR/link':>8} {'AG/link':>8} {'fitted eff':>10}"
    )
    for gpu in NCCL_GPUS:
        hw = load_hardware(gpu)
        model_bw = cal.scaleup_efficiency * hw.scaleup_Bps
        for n in (8, 4):
            ar = collective_bus_bandwidth(gpu, "all_reduce", n, MESSAGE_BYTES)
            ag = collective_bus_bandwidth(gpu, "all_gather", n, MESSAGE_BYTES)
            if ar is None and ag is None:
                continue
            print(
                f"{gpu:<10} {n:>4} {_fmt(ar and ar / 1e9, '.0f'):>10} {_fmt(ag and ag / 1e9, '.0f'):>10} "
                f"{model_bw / 1e9:>18.0f} {_fmt(ar and ar / hw.scaleup_Bps, '.2f'):>8} "
                f"{_fmt(ag and ag / hw.scaleup_Bps, '.2f'):>8} {cal.scaleup_efficiency:>10.2f}"
            )
            break


def main() -> None:
    if not available():
        print("aiconfigurator-core and pyarrow are not installed: pip install 'tenfold[measured]'")
        return
    summary(gemm_rows())
    nccl()


if __name__ == "__main__":
    main()
