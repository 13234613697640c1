"""The training-aware precision policy against all-NVFP4 and NVIDIA's heuristic, paired by seed.

For each seed (initial weights and batch order): a bf16 run of the reference GPT (4 blocks x 128) is
paused at `--calib-steps`; from that checkpoint `tenfold.engine.autoprecision.training.train_sensitivity`
takes `--probe-steps` AdamW steps per block with that block's GEMMs in NVFP4 against the same steps in
bf16 (calibration batches no run trains on, scored on other calibration batches), and the policy keeps in
bf16 the blocks whose NVFP4 steps raised the loss most, as many as NVIDIA's heuristic keeps (the last
ceil(12.5 %) of blocks: one of four), so both run the same FP4 share of GEMM FLOPs. `greedy_repair` then
checks it with short joint runs. The gated policy trusts only harms beyond twice their standard error
(over the held-out calibration batches) and gives the slots they do not fill to the heuristic's blocks,
so where nothing is measured it is the heuristic. Each seed trains, from the same initial weights on the
same batches: all linears NVFP4 (`nvfp4_no_hp_layers`), the heuristic (`nvfp4`) and both policies; scored
on the same 48 held-out batches. Printed: mean final validation loss per configuration and the paired
difference of each policy against the heuristic with its standard error; "beats" needs the mean below
-2 SE (two policies are tested, so one "beats" in two tries is weaker evidence than it reads).

    python benchmarks/train_policy.py [--seeds 0,1,2,3,4,5] [--steps 300] [--out runs/train_policy]
    python benchmarks/train_policy.py --model llama --out runs/train_policy_llama

`--model llama` trains a Hugging Face Llama built from its configuration (`tenfold.train.hf.llama`: RMSNorm,
SwiGLU, rotary attention), `--layers` deep (default 12, so the heuristic's tail is ceil(0.125 x 12) = 2
blocks), d_model 128, 4 heads, d_ff 384, instead of the reference GPT; everything else is the same.

Results are cached per (configuration, seed) in --out, so a run can be resumed or split over processes
(`--seeds 0,1,2` and `--seeds 3,4,5`, then any run over all seeds prints the table).
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from pathlib import Path

import torch

from _reference import FINAL_EVAL_BATCHES, MODEL, add_training_args, config, data_path
from tenfold.engine import recipe
from tenfold.engine.autoprecision.policy import PrecisionPolicy
from tenfold.engine.autoprecision.training import greedy_repair, train_sensitivity
from tenfold.engine.convert import ConversionPolicy
from tenfold.stats import paired_difference
from tenfold.train import ByteDataset, Trainer, load_corpus
from tenfold.train.hf import llama

FP4 = "nvfp4_no_hp_layers"
CONFIGS = {"all nvfp4": {"recipe": FP4}, "NVIDIA heuristic": {"recipe": "nvfp4"}}
POLICIES = ("training-aware policy", "gated policy")


def builder(args: argparse.Namespace):
    """The model factory the trainer calls after seeding: None for the reference GPT, else a Llama."""
    if args.model == "gpt":
        return None
    shape = {k: MODEL[k] for k in ("d_model", "n_heads", "d_ff", "seq_len")}
    return lambda: llama(n_layers=args.layers, **shape)


def shape(args: argparse.Namespace) -> dict:
    return {} if args.model == "gpt" else {"n_layers": args.layers}


def choose(args: argparse.Namespace, data: ByteDataset, seed: int, out: Path) -> dict:
    cfg = config(args, seed, recipe="bf16", **shape(args))
    tr = Trainer(cfg, dataset=data, model=builder(args))
    while tr.step < args.calib_steps:
        tr.train_step()
    seq = cfg.gpt_config().seq_len
    batches = data.calibration_batches(args.probe_steps + 4, args.batch_size, seq, seed)
    train, held = batches[: args.probe_steps], batches[args.probe_steps :]

    def make_opt(params):  # the trainer's optimizer and learning rate at the checkpoint
        return torch.optim.AdamW(params, lr=args.lr, weight_decay=0.1)

    t0 = time.perf_counter()
    pol = ConversionPolicy(quant_backend="eager")
    s = train_sensitivity(tr.model, make_opt, train, held, (FP4,), policy=pol)
    harm = {g: d[FP4] for g, d in s.delta.items()}
    se = {g: d[FP4] for g, d in s.delta_se.items()}
    n_keep = math.ceil(recipe("nvfp4").hp_tail * len(s.layers) - 1e-9)  # as many as the heuristic keeps
    keep = sorted(harm, key=harm.get, reverse=True)[:n_keep]
    final, trials = greedy_repair(
        tr.model, make_opt, train, held, s, [g for g in s.layers if g not in keep], fp4=FP4, policy=pol
    )
    took = time.perf_counter() - t0
    # gated: only a harm beyond 2 SE is a measurement; the slots it does not fill go to the heuristic's
    # blocks (the last ones), so with nothing measured the gated policy is the heuristic
    measured = sorted((g for g in harm if harm[g] > 2 * se[g]), key=harm.get, reverse=True)[:n_keep]
    tail = sorted(s.layers, key=lambda g: int(g.split()[-1]), reverse=True)
    gated = measured + [g for g in tail if g not in measured][: n_keep - len(measured)]
    paths = {}
    for name, fp4 in (
        ("training-aware policy", final),
        ("gated policy", [g for g in s.layers if g not in gated]),
    ):
        fp4_layers = {n for g in fp4 for n in s.layers[g]}
        layers = {n: ("nvfp4" if n in fp4_layers else "bf16") for names in s.layers.values() for n in names}
        meta = {"score": "training", "seed": seed, "select": name}
        stem = f"{name.split()[0].replace('-', '_')}_seed{seed}"
        paths[name] = str(PrecisionPolicy(layers=layers, meta=meta).save(out / f"policy_{stem}.toml"))
    info = {
        "delta": harm,
        "delta_se": se,
        "kept_bf16": sorted(set(s.layers) - set(final)),
        "gated_bf16": sorted(gated),
        "measured_beyond_2se": measured,
        "trials": trials,
        "seconds": took,
        "policies": paths,
    }
    shown = {k: f"{harm[k]:+.4f}({se[k]:.4f})" for k in harm}
    print(
        f"seed {seed}: block harm (SE) {json.dumps(shown)}; bf16: {info['kept_bf16']}, "
        f"gated: {sorted(gated)} ({took:.0f} s, {len(trials)} repair trial(s))",
        flush=True,
    )
    return info


def run(args: argparse.Namespace, data: ByteDataset, name: str, seed: int, out: Path, **kw: object) -> float:
    cache = out / f"{name.replace(' ', '_')}_seed{seed}.json"
    if cache.exists():
        return json.loads(cache.read_text())["final_val_loss"]
    t0 = time.perf_counter()
    tr = Trainer(config(args, seed, **kw, **shape(args)), dataset=data, model=builder(args))
    tr.run()
    loss = tr.evaluate(FINAL_EVAL_BATCHES)
    cache.write_text(json.dumps({"final_val_loss": loss, "seconds": time.perf_counter() - t0}))
    print(f"{name:<18} seed {seed}: final val loss {loss:.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return loss


def compared(args: argparse.Namespace, data: ByteDataset, seed: int, out: Path, info: dict) -> dict:
    """Final losses of the heuristic and both policies for one seed. A policy that keeps the same bf16
    blocks as a configuration already run is the same run (a policy with the heuristic's layout trains
    bit for bit like the recipe: tests/train/test_train.py), so its loss is taken, not recomputed."""
    n, k = len(info["delta"]), len(info["gated_bf16"])
    layouts = {
        "NVIDIA heuristic": [f"block {i}" for i in range(n - k, n)],
        "training-aware policy": info["kept_bf16"],
        "gated policy": info["gated_bf16"],
    }
    done: dict[tuple[str, ...], tuple[str, float]] = {}
    losses = {}
    for name, blocks in layouts.items():
        key = tuple(sorted(blocks))
        if key in done:
            same, losses[name] = done[key]
            print(f"{name:<18} seed {seed}: keeps the blocks {same} keeps, the same run", flush=True)
            continue
        kw = CONFIGS[name] if name in CONFIGS else {"policy": info["policies"][name]}
        losses[name] = run(args, data, name, seed, out, **kw, eval_every=0)
        done[key] = (name, losses[name])
    return losses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_training_args(ap, steps=300)
    ap.add_argument("--seeds", default="0,1,2,3,4,5")
    ap.add_argument("--model", choices=("gpt", "llama"), default="gpt", help="reference GPT or HF Llama")
    ap.add_argument("--layers", type=int, default=12, help="--model llama: number of blocks")
    ap.add_argument("--calib-steps", type=int, default=100, help="bf16 steps before the measurement")
    ap.add_argument("--probe-steps", type=int, default=8, help="optimizer steps per block and format")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--no-all-nvfp4", dest="all_nvfp4", action="store_false", help="skip the all-NVFP4 context runs"
    )
    ap.add_argument("--out", default="runs/train_policy")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    data = ByteDataset.from_bytes(load_corpus(data_path(args.data)))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    losses: dict[str, list[float]] = {k: [] for k in (*CONFIGS, *POLICIES)}
    infos = {}
    for seed in seeds:  # first the comparison that decides, then all-NVFP4 for context
        info_path = out / f"policy_seed{seed}.json"
        if info_path.exists():
            infos[seed] = json.loads(info_path.read_text())
        else:
            infos[seed] = choose(args, data, seed, out)
            info_path.write_text(json.dumps(infos[seed], indent=1))
        for name, loss in compared(args, data, seed, out, infos[seed]).items():
            losses[name].append(loss)
    for seed in seeds if args.all_nvfp4 else ():
        losses["all nvfp4"].append(
            run(args, data, "all nvfp4", seed, out, **CONFIGS["all nvfp4"], eval_every=0)
        )
    if not args.all_nvfp4:
        del losses["all nvfp4"]
    what = "4x128 GPT" if args.model == "gpt" else f"{args.layers}x128 Llama (HF, from config)"
    print(f"\n{what}, {args.steps} steps, {len(seeds)} seeds; final val loss ({FINAL_EVAL_BATCHES} batches)")
    for name, v in losses.items():
        print(f"{name:<24} mean {sum(v) / len(v):.4f}  " + " ".join(f"{x:.4f}" for x in v))
    for name in ("all nvfp4", *POLICIES) if args.all_nvfp4 else POLICIES:
        d = paired_difference(losses[name], losses["NVIDIA heuristic"])
        beats = not math.isnan(d.se) and d.mean < -2 * d.se
        verdict = "beats" if beats else "does not beat"
        tail = f"  -> {verdict} the heuristic by > 2 SE" if name != "all nvfp4" else ""
        print(f"{name} - heuristic: {d.mean:+.4f} +- {d.se:.4f} (SE, n={d.n}){tail}")


if __name__ == "__main__":
    main()
