"""`examples/hf_train.py` under FSDP2 (`fully_shard`): 2 CPU processes (gloo), started by this script.

Each rank builds the same model from the same seed, converts it, shards every decoder layer and then the
root with `torch.distributed.fsdp.fully_shard`, and trains on its half of every global batch (rank r
takes rows r·B/2 .. (r+1)·B/2 of the batch the single-process run draws). FSDP2 averages the gradients
over ranks, so each step's update is that of the whole batch; rank 0 prints the loss averaged over ranks.
Then (unless `--no-compare`) the same recipes train in this process without FSDP and the two loss curves
are compared step by step. What to expect (measured with the defaults, 50 steps):

* bf16 matches to fp32 tolerance all along (relative 2e-7): the same math, only the order of the fp32
  sums differs (two partial weight gradients, then the all-reduce);
* mxfp8 matches to fp32 tolerance in the first steps (its scales are per block of 32 values along the
  reduction dimension, so halving the batch changes no scale), then drifts (relative 2e-3 by step 50):
  the ulp-sized differences of the fp32 gradient sums move a few values across an FP8 rounding
  boundary, and each such flip is a whole FP8 step (2^-3 relative), so the two runs diverge like two
  runs of any quantized model whose sums are ordered differently;
* recipes with a tensor-wide scale differ from the first step (nvfp4: relative 4e-3 by step 50): its
  per-tensor fp32 amax (fp8_current's too) is taken over each rank's half of the activations and
  gradients, so scales and quantized values differ from the single-process run; the stochastic-rounding
  noise is indexed by position in the local tensor, so it differs as well. Delayed scaling all-reduces
  its amax history, but only at the step boundary. These curves agree to the size of the quantization
  noise, not to fp tolerance.

    python examples/hf_train_fsdp.py                   # llama, bf16 / mxfp8 / nvfp4, 50 steps
    torchrun is not needed: the script spawns its 2 workers itself (torch.multiprocessing, spawn).
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_train  # the single-process example beside this file

WORLD = 2


def shard(model: torch.nn.Module) -> None:
    """FSDP2: one unit per decoder layer, then the root (embeddings, final norm, LM head)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (WORLD,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def worker(rank: int, args: argparse.Namespace, init: str, out: str) -> None:
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    try:
        data = hf_train.load_data(args)
        per = args.batch_size // WORLD
        rows = slice(rank * per, (rank + 1) * per)
        results = {}
        for name in args.recipes:
            model = hf_train.build_model(
                args.model, seed=args.seed, d_model=args.d_model, n_layers=args.layers, seq_len=args.seq_len
            )
            summary = hf_train.convert_for(model, name, args)
            shard(model)
            losses = torch.tensor(hf_train.train(model, data, args, rows=rows), dtype=torch.float64)
            dist.all_reduce(losses)  # equal token counts per rank: the mean of rank means is the batch mean
            losses /= WORLD
            results[name] = {
                "summary": summary,
                "losses": losses,
                "val": hf_train.evaluate(model, data, args),
            }
        if rank == 0:
            torch.save(results, Path(out) / "fsdp.pt")
        dist.barrier()  # no rank tears its connections down while another still uses them
    finally:
        dist.destroy_process_group()


def run_fsdp(args: argparse.Namespace) -> dict[str, dict]:
    """Train every recipe with FSDP2 on WORLD spawned processes; rank 0's results."""
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(
            worker, args=(args, f"file://{tmp}/init", tmp), nprocs=WORLD, join=True, start_method="spawn"
        )
        return torch.load(Path(tmp) / "fsdp.pt")


def compare(fsdp: dict[str, dict], args: argparse.Namespace) -> None:
    """Train the same recipes in this process and print how far the FSDP losses are from them."""
    data = hf_train.load_data(args)
    base = hf_train.build_model(
        args.model, seed=args.seed, d_model=args.d_model, n_layers=args.layers, seq_len=args.seq_len
    )
    print("\nsingle process, same batches (whole batch in one process):")
    for name in args.recipes:
        model = copy.deepcopy(base)
        hf_train.convert_for(model, name, args)
        single = torch.tensor(hf_train.train(model, data, args), dtype=torch.float64)
        diff = (fsdp[name]["losses"] - single).abs()
        rel = (diff / single.abs()).max().item()
        print(
            f"{name:<20} final loss fsdp {fsdp[name]['losses'][-1]:.6f} single {single[-1]:.6f}; |diff| "
            f"step 1 {diff[0].item():.1e}, max over {len(single)} steps {diff.max().item():.1e} "
            f"(relative {rel:.1e})"
        )


def main(argv: list[str] | None = None) -> None:
    ap = hf_train.make_parser(steps=50, doc=__doc__)
    ap.add_argument("--no-compare", action="store_true", help="skip the single-process comparison run")
    args = hf_train.parse_args(argv, ap)
    if args.batch_size % WORLD:
        ap.error(f"--batch-size {args.batch_size} must be a multiple of the {WORLD} ranks")
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    t0 = time.perf_counter()
    fsdp = run_fsdp(args)
    took = time.perf_counter() - t0
    print(f"FSDP2 on {WORLD} CPU processes (gloo), {args.model}, {args.steps} steps, {took:.0f} s")
    for r in fsdp.values():
        print(r["summary"])
    results = {}
    for name, r in fsdp.items():
        losses = r["losses"].tolist()
        tail = losses[-max(len(losses) // 10, 1) :]
        results[name] = (sum(tail) / len(tail), r["val"])
    hf_train.print_results(results, label="fsdp ")
    if not args.no_compare:
        compare(fsdp, args)


if __name__ == "__main__":
    main()
