"""DDP and FSDP2 (`fully_shard`) on CPU with gloo and 2 processes: training works and delayed-scaling
amaxes are all-reduced (MAX), so every rank quantizes with the same scales."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from tenfold.engine import QuantLinear, convert, recipe, update_scaling

WORLD = 2
STEPS = 3
TIMEOUT_S = 120


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64))


def batch(rank: int, step: int) -> torch.Tensor:
    """Rank 1's activations are larger than rank 0's, so local amaxes differ."""
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(32, 64, generator=g) * (1.0 + 3.0 * rank) * (step + 1)


def worker(rank: int, kind: str, init: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    try:
        net = model()
        convert(net, recipe("fp8_delayed", amax_history_len=8))
        if kind == "ddp":
            run = nn.parallel.DistributedDataParallel(net)
        else:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            mesh = init_device_mesh("cpu", (WORLD,))
            for m in net:
                if isinstance(m, QuantLinear):
                    fully_shard(m, mesh=mesh)
            run = fully_shard(net, mesh=mesh)
        opt = torch.optim.SGD(run.parameters(), lr=0.01)
        local_amax, losses = [], []
        for step in range(STEPS):
            x = batch(rank, step)
            local_amax.append(x.abs().amax())
            loss = run(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            update_scaling(net)
            losses.append(loss.detach())
        layers = [m for m in net.modules() if isinstance(m, QuantLinear)]
        params = [p.full_tensor() if hasattr(p, "full_tensor") else p.detach() for p in run.parameters()]
        torch.save(
            {
                "scale": [m.scale.clone() for m in layers],
                "history": [m.amax_history.clone() for m in layers],
                "local_amax": torch.stack(local_amax),
                "losses": torch.stack(losses),
                "params": [p.detach().clone() for p in params],
            },
            Path(out) / f"rank{rank}.pt",
        )
        dist.barrier()  # no rank tears its connections down while another still uses them
    finally:
        dist.destroy_process_group()


def launch(kind: str, tmp_path: Path) -> list[dict]:
    ctx = mp.start_processes(
        worker,
        args=(kind, f"file://{tmp_path / 'init'}", str(tmp_path)),
        nprocs=WORLD,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + TIMEOUT_S
    while not ctx.join(timeout=1.0):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"{kind} workers did not finish within {TIMEOUT_S} s")
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]


def check_scales_are_reduced(res: list[dict]) -> None:
    r0, r1 = res
    for a, b in zip(r0["scale"] + r0["history"], r1["scale"] + r1["history"], strict=True):
        assert torch.equal(a, b)  # every rank holds the same scaling state
    # the first layer's input amax is the MAX over ranks of each step's local amax
    global_amax = torch.maximum(r0["local_amax"], r1["local_amax"])
    hist = r0["history"][0][0]  # x row of layer 0, rolled STEPS times
    assert torch.equal(hist[-STEPS:], global_amax)
    assert torch.equal(r0["scale"][0][0], 448.0 / global_amax.max())
    assert not torch.equal(r0["local_amax"], global_amax)  # rank 0 alone would have picked another scale


def test_ddp_reduces_delayed_scaling_amax_across_ranks(tmp_path):
    res = launch("ddp", tmp_path)
    check_scales_are_reduced(res)
    for a, b in zip(res[0]["params"], res[1]["params"], strict=True):
        assert torch.equal(a, b)


def test_fsdp2_trains_with_reduced_amax_like_ddp(tmp_path):
    pytest.importorskip("torch.distributed.fsdp", reason="this torch has no FSDP2")
    fsdp = launch("fsdp", tmp_path)
    check_scales_are_reduced(fsdp)
    (tmp_path / "ddp").mkdir()
    ddp = launch("ddp", tmp_path / "ddp")
    for a, b in zip(fsdp[0]["scale"], ddp[0]["scale"], strict=True):
        assert torch.equal(a, b)
    for a, b in zip(fsdp[0]["params"], ddp[0]["params"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # same math, other reduction order
    torch.testing.assert_close(fsdp[0]["losses"], ddp[0]["losses"])


def test_reduce_is_a_no_op_without_a_process_group():
    assert not dist.is_initialized()
    net = model()
    convert(net, "fp8_delayed")
    net(torch.randn(4, 64)).sum().backward()
    before = [m.amax_history[:, 0].clone() for m in net.modules() if isinstance(m, QuantLinear)]
    assert update_scaling(net) == 2
    after = [m.amax_history[:, -1] for m in net.modules() if isinstance(m, QuantLinear)]
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert os.environ.get("WORLD_SIZE") in (None, "1")
