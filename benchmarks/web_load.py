"""Load test of the web API on loopback: N training-estimate requests at concurrency C against
`tenfold serve` in its own process, beside the same estimate called in-process (what the HTTP layer adds).

Prints throughput, p50 / p95 / p99 latency and the error count. Target: p95 < 100 ms, 0 errors at
2,000 requests and concurrency 16. Traffic goes only to 127.0.0.1; the loop is bounded in count and time.

Usage: python benchmarks/web_load.py [--requests 2000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import httpx

from tenfold.perf import Layout, estimate_training
from tenfold.report import training_breakdown_chart, training_memory_chart

BODIES = [  # a few plans, so the server does not answer one request over and over
    {"model": "llama3-70b", "gpu": "h100-sxm", "tp": 4, "pp": 8, "vp": 5, "dp": 2, "precision": "fp8"},
    {"model": "llama3-8b", "gpu": "b200", "tp": 1, "pp": 1, "vp": 1, "dp": 8, "global_batch": 64},
    {"model": "llama3.1-405b", "gpu": "gb200", "tp": 8, "pp": 8, "vp": 4, "dp": 16, "global_batch": 512},
    {
        "model": "mixtral-8x7b",
        "gpu": "h200",
        "tp": 2,
        "pp": 4,
        "vp": 1,
        "dp": 4,
        "ep": 4,
        "global_batch": 256,
    },
]
TIME_BUDGET_S = 300.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=1000, method="inclusive")[round(q * 10) - 1]


async def load(url: str, n: int, conc: int) -> tuple[list[float], int, float]:
    lat: list[float] = []
    errors = 0
    t_stop = time.perf_counter() + TIME_BUDGET_S
    queue = iter(range(n))
    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30.0) as client:

        async def worker() -> None:
            nonlocal errors
            for i in queue:
                if time.perf_counter() > t_stop:
                    return
                t0 = time.perf_counter()
                try:
                    r = await client.post("/api/estimate/train", json=BODIES[i % len(BODIES)])
                    ok = r.status_code == 200 and r.json()["result"]["step_time_s"] is not None
                except (httpx.HTTPError, KeyError, ValueError):
                    ok = False
                lat.append(time.perf_counter() - t0)
                errors += not ok

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(conc)))
        wall = time.perf_counter() - t0
    return lat, errors, wall


def in_process(reps: int = 200) -> float:
    """Mean seconds of the same work without HTTP: the estimate and its two charts."""
    b = BODIES[0]
    t0 = time.perf_counter()
    for _ in range(reps):
        e = estimate_training(
            b["model"],
            b["gpu"],
            Layout(tp=4, pp=8, vp=5, dp=2),
            seq_len=8192,
            global_batch=256,
            precision="fp8",
        )
        json.dumps([training_breakdown_chart([e]).to_dict(), training_memory_chart([e]).to_dict()])
    return (time.perf_counter() - t0) / reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    exe = [sys.executable, "-m", "tenfold.cli.main", "serve", "--port", str(port), "--json"]
    server = subprocess.Popen(exe, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy())
    try:
        t_end = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/api/catalog", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > t_end or server.poll() is not None:
                raise SystemExit(f"server did not start: {server.stderr.read().decode()[-2000:]}")
            time.sleep(0.1)
        asyncio.run(load(url, 50, args.concurrency))  # warm-up, not counted
        lat, errors, wall = asyncio.run(load(url, args.requests, args.concurrency))
    finally:
        server.terminate()
        server.wait(timeout=10)
    direct = in_process()
    ms = [x * 1e3 for x in lat]
    p50, p95, p99 = pct(ms, 50), pct(ms, 95), pct(ms, 99)
    n = len(lat)
    print(f"web load: POST /api/estimate/train on loopback, {n:,} requests at concurrency {args.concurrency}")
    heads = ("requests", "errors", "wall s", "req/s", "p50 ms", "p95 ms", "p99 ms", "max ms")
    print(" ".join(f"{h:>9}" for h in heads))
    vals = (
        f"{n:,}",
        str(errors),
        f"{wall:.2f}",
        f"{n / wall:.1f}",
        *(f"{v:.1f}" for v in (p50, p95, p99, max(ms))),
    )
    print(" ".join(f"{v:>9}" for v in vals))
    ratio = p50 / (direct * 1e3)
    print(f"in-process estimate + charts: {direct * 1e3:.2f} ms; HTTP p50 / in-process: {ratio:.1f}x")
    verdict = "met" if p95 < 100 and errors == 0 else "NOT met"
    print(f"target p95 < 100 ms and 0 errors: {verdict}")


if __name__ == "__main__":
    main()
