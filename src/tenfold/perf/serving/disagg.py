"""Disaggregated prefill/decode (P/D) serving: a prefill-only worker, a decode-only worker, the KV transfer
between them, and a P/D deployment sized for a load.

Disaggregation runs the two phases of a request on separate instances (DistServe, arXiv 2401.09670;
Splitwise, arXiv 2311.18677): a prefill (context) instance computes the prompt's KV cache and the first
token, the KV cache moves to a decode (generation) instance, which generates the rest. Each pool gets its
own parallelism (SGLang runs DeepEP's normal dispatch on prefill and its low-latency dispatch on decode,
which one aggregated instance cannot mix; LMSYS, "Deploying DeepSeek with PD Disaggregation and
Large-scale Expert Parallelism on 96 H100 GPUs", https://lmsys.org/blog/2025-05-05-large-scale-ep).

* Prefill worker: steps of min(b·ISL, max_num_tokens) prompt tokens and no decode tokens, i.e. the
  aggregated model's prefill-only path (steady_state.evaluate with OSL = 1). TTFT = the step(s) carrying
  one prompt + the wait for a slot; rate = prompts finished per second.
* Decode worker: every step carries b·q decode tokens and no prompt tokens (step.step_times with p = 0), so
  TPOT = t_step/a with none of the aggregated model's prefill interference; it generates OSL - 1 tokens
  per request (the prefill instance produced the first). Its batch limit is the KV memory, max_batch_size
  and max_num_tokens // q (no prompt chunk shares the step).
* KV transfer: the prompt's KV bytes (kvcache.kv_bytes_per_sequence, each sending rank its own heads or
  its own sequences) over the link joining the pools: NVLink when one prefill and one decode instance fit
  in a scale-up domain (GB200 NVL72), else each GPU's NIC (comm.py links, calibrated efficiencies).
  TensorRT-LLM sends a request's blocks once its context phase ends and overlaps the transfer with other
  requests' compute, ranks sending in parallel (docs/source/features/disagg-serving.md, "Overlap
  Optimization", https://github.com/NVIDIA/TensorRT-LLM); SGLang's Mooncake/NIXL backends send after the
  prefill forward from a background thread (the LMSYS blog above); vLLM's NixlConnector has the decode
  instance pull the blocks after prefill. So by default the whole transfer adds to TTFT and not to
  throughput; `layerwise=True` models connectors that send each layer as it is computed (vLLM's KV
  connector API `save_kv_layer`, as LMCache uses it), exposing only the last layer's share. A link too
  slow for the prefill pool's KV output limits prefill (`link_utilization` > 1).
* Deployment: each pool runs at the operating point with the highest rate that meets its target (decode:
  TPOT; prefill: TTFT = prefill TTFT + exposed transfer + one decode step, the first streamed token).
  For a load of R requests/s: n_P = ceil(R / r_P) prefill and n_D = ceil(R / r_D) decode instances; a
  concurrency C converts by Little's law, R = C / (TTFT + (OSL - 1)·TPOT). Per-GPU rates count both
  pools' GPUs.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from tenfold.perf import comm
from tenfold.perf.calibration import Calibration, load_calibration
from tenfold.perf.errors import Infeasible
from tenfold.perf.serving.disagg_results import DisaggEstimate, KVTransfer, WorkerEstimate
from tenfold.perf.serving.kvcache import kv_bytes_per_sequence
from tenfold.perf.serving.query import ServingQuery
from tenfold.perf.serving.results import Deployment
from tenfold.perf.serving.steady_state import ServingSetup, batch_capacity, evaluate, setup_serving
from tenfold.perf.serving.step import serving_rates, step_times
from tenfold.perf.specs.precision import get_precision

KV_LINKS = ("auto", "scale-up", "network")


def prefill_query(query: ServingQuery, deployment: Deployment | None = None) -> ServingQuery:
    """The query a prefill-only instance runs: one output token, no speculative decoding."""
    return replace(
        query, deployment=deployment or query.deployment, output_len=1, draft_tokens=0, accepted_tokens=1.0
    )


def _infeasible(role: str, s: ServingSetup, why: str) -> WorkerEstimate:
    nan = math.nan
    dep = s.query.deployment
    return WorkerEstimate(
        role=role, deployment=dep, num_gpus=dep.gpus, feasible=False, reason=why, concurrency=0,
        batch_per_rank=0, capacity=0, limited_by="", step_time_s=nan, ttft_s=nan, tpot_s=nan,
        requests_per_s=nan, input_tokens_per_s_per_gpu=nan, output_tokens_per_s_per_gpu=nan, notes=s.notes,
    )  # fmt: skip


def prefill_rates(s: ServingSetup, concurrency) -> dict[str, np.ndarray]:
    """A feasible prefill-only setup (OSL = 1) over concurrency: b, cap, step_s, ttft_s, requests_per_s,
    in_gpu (prompt tokens/s per GPU)."""
    q = s.query
    v = evaluate(s, np.asarray(concurrency, dtype=float))
    req = v["total_gpu"] * q.deployment.gpus / (q.input_len + 1)
    return {
        "b": v["b"],
        "cap": v["cap"],
        "step_s": v["step_s"],
        "ttft_s": v["ttft_s"],
        "requests_per_s": req,
        "in_gpu": req * q.input_len / q.deployment.gpus,
    }


def decode_capacity(s: ServingSetup) -> tuple[int, str]:
    """Most sequences per attention rank of a decode-only instance and what limits them: KV memory,
    max_batch_size, or max_num_tokens // q (no prompt tokens share its steps)."""
    q = s.query
    limits = {
        "kv_memory": s.memory.max_batch_memory,
        "max_batch_size": q.engine.max_batch_size,
        "max_num_tokens": max(int(s.memory.max_num_tokens // q.tokens_per_step), 1),
    }
    name = min(limits, key=limits.get)
    return int(limits[name]), name


def decode_rates(s: ServingSetup, concurrency) -> dict[str, np.ndarray]:
    """A feasible decode-only setup over concurrency: b, cap, step_s, tpot_s, requests_per_s, out_gpu
    (generated tokens/s per GPU). Steps carry no prompt tokens (p = 0); the mean cached context is
    ISL + OSL/2, as in the aggregated model."""
    q = s.query
    dep, fmts, hw = q.deployment, q.formats, q.hardware
    cap = decode_capacity(s)[0] * dep.dp
    c = np.asarray(concurrency, dtype=float)
    running = np.minimum(c, cap)
    b = np.ceil(running / dep.dp)
    # attention MMAs run in FP8 with an FP8/FP4 cache where the GPU has FP8 (as steady_state.evaluate)
    kv_compute = get_precision("fp8" if fmts.kv in ("fp8", "nvfp4") and "fp8" in hw.peak_flops else "bf16")
    st = step_times(
        q.model,
        formats=fmts,
        rates=serving_rates(hw, fmts, s.calibration, kv_compute),
        links=s.calibration.links(hw),
        tp=dep.tp,
        dp=dep.dp,
        ep=dep.ep,
        b=b,
        p=np.zeros_like(b),
        q=q.tokens_per_step,
        ctx_dec=q.input_len + q.output_len / 2,
        isl=q.input_len,
        draft_tokens=q.draft_tokens,
        ep_overlap=q.engine.ep_overlap,
        ep_comm=q.engine.ep_comm,
    )
    t = st["step_s"]
    a = q.accepted_tokens
    generated = running * a / t  # tokens the instance generates per second
    return {
        "b": b,
        "cap": np.full_like(c, cap),
        "step_s": t,
        "tpot_s": t / a,
        "requests_per_s": generated / max(q.output_len - 1, 1),
        "out_gpu": generated / dep.gpus,
    }


def prefill_worker(
    query: ServingQuery, *, concurrency: int | None = None, calibration: Calibration | None = None
) -> WorkerEstimate:
    """A prefill-only instance of `query`'s deployment (its output_len is ignored) at `concurrency`
    prompts in flight (None = as many as fit)."""
    s = setup_serving(prefill_query(query), calibration)
    if s.problems:
        return _infeasible("prefill", s, "; ".join(s.problems))
    cap, limit = batch_capacity(s)
    conc = concurrency if concurrency is not None else cap * s.query.deployment.dp
    v = {k: float(x[0]) for k, x in prefill_rates(s, [conc]).items()}
    return WorkerEstimate(
        role="prefill", deployment=s.query.deployment, num_gpus=s.query.deployment.gpus, feasible=True,
        reason="", concurrency=int(conc), batch_per_rank=int(v["b"]), capacity=int(v["cap"]),
        limited_by=limit, step_time_s=v["step_s"], ttft_s=v["ttft_s"], tpot_s=math.nan,
        requests_per_s=v["requests_per_s"], input_tokens_per_s_per_gpu=v["in_gpu"],
        output_tokens_per_s_per_gpu=0.0, notes=s.notes,
    )  # fmt: skip


def decode_worker(
    query: ServingQuery, *, concurrency: int | None = None, calibration: Calibration | None = None
) -> WorkerEstimate:
    """A decode-only instance of `query` at `concurrency` sequences generating (None = as many as fit)."""
    s = setup_serving(query, calibration)
    if s.problems:
        return _infeasible("decode", s, "; ".join(s.problems))
    cap, limit = decode_capacity(s)
    conc = concurrency if concurrency is not None else cap * s.query.deployment.dp
    v = {k: float(x[0]) for k, x in decode_rates(s, [conc]).items()}
    notes = s.notes
    if conc > v["cap"]:
        notes = (*notes, f"concurrency {conc} exceeds the {int(v['cap'])} sequences that fit ({limit})")
    return WorkerEstimate(
        role="decode", deployment=s.query.deployment, num_gpus=s.query.deployment.gpus, feasible=True,
        reason="", concurrency=int(conc), batch_per_rank=int(v["b"]), capacity=int(v["cap"]),
        limited_by=limit, step_time_s=v["step_s"], ttft_s=math.nan, tpot_s=v["tpot_s"],
        requests_per_s=v["requests_per_s"], input_tokens_per_s_per_gpu=0.0,
        output_tokens_per_s_per_gpu=v["out_gpu"], notes=notes,
    )  # fmt: skip


def kv_link_kind(links: comm.Links, prefill: Deployment, decode: Deployment, kv_link: str = "auto") -> str:
    """Which link carries the KV cache: "scale-up" when one prefill and one decode instance fit in one
    scale-up domain (or when asked), else "network"."""
    if kv_link not in KV_LINKS:
        raise ValueError(f"kv_link {kv_link!r} not in {KV_LINKS}")
    if kv_link != "auto":
        return kv_link
    return "scale-up" if prefill.gpus + decode.gpus <= links.domain else "network"


def kv_transfer(
    query: ServingQuery, links: comm.Links, *, prefill: Deployment, link: str, layerwise: bool = False
) -> KVTransfer:
    """Seconds to move one prompt's KV cache from a prefill instance to a decode instance. Each sending
    rank moves its share (its KV heads under TP; MLA's latent is replicated, so one rank of a TP group
    sends it) in parallel with the others, at its own link's rate, plus one link latency."""
    model = query.model
    per_rank = float(kv_bytes_per_sequence(model, query.formats.kv, query.input_len, tp=prefill.tp))
    senders = 1 if model.is_mla else min(prefill.tp, max(model.kv_heads, 1))
    bw, lat = (
        (links.up_Bps, links.up_latency_s) if link == "scale-up" else (links.out_Bps, links.out_latency_s)
    )
    whole = lat + per_rank / bw
    exposed = lat + per_rank / model.layers / bw if layerwise else whole
    return KVTransfer(
        link=link,
        layerwise=layerwise,
        bytes_per_request=per_rank * senders,
        bytes_per_rank=per_rank,
        seconds=whole,
        exposed_s=exposed,
    )


def _best(rate: np.ndarray, ok: np.ndarray) -> tuple[int, bool]:
    """Index of the highest rate among the points that meet the target (the first such), and whether
    any does; without one, the point with the lowest latency (index 0)."""
    if not ok.any():
        return 0, False
    return int(np.argmax(np.where(ok, rate, -np.inf))), True


def plan_disagg(
    query: ServingQuery,
    *,
    prefill: Deployment,
    decode: Deployment,
    requests_per_s: float | None = None,
    concurrency: int | None = None,
    ttft_target_s: float | None = None,
    tpot_target_s: float | None = None,
    kv_link: str = "auto",
    layerwise: bool = False,
    calibration: Calibration | None = None,
) -> DisaggEstimate:
    """Size a P/D deployment of `query` (model, GPU, lengths, formats, engine; its deployment is ignored):
    prefill instances of `prefill`, decode instances of `decode`, for a load of `requests_per_s` or
    `concurrency` requests in flight (neither: one decode instance's worth). Each pool runs at its best
    point meeting the TTFT / TPOT targets (module docstring). Raises Infeasible when a worker cannot run,
    ValueError for bad input."""
    for name, v in (("requests_per_s", requests_per_s), ("concurrency", concurrency)):
        if v is not None and v <= 0:
            raise ValueError(f"{name} must be > 0, got {v}")
    if requests_per_s is not None and concurrency is not None:
        raise ValueError("give requests_per_s or concurrency, not both")
    if query.output_len < 2:
        raise ValueError(f"output_len must be >= 2 for a decode pool, got {query.output_len}")
    cal = calibration or load_calibration(kind="inference")
    sp = setup_serving(prefill_query(query, prefill), cal)
    sd = setup_serving(replace(query, deployment=decode), cal)
    for role, s in (("prefill", sp), ("decode", sd)):
        if s.problems:
            raise Infeasible(f"{role} worker ({s.query.deployment.describe()}): " + "; ".join(s.problems))
    links = cal.links(query.hardware)
    kv = kv_transfer(query, links, prefill=prefill, link=kv_link_kind(links, prefill, decode, kv_link),
                     layerwise=layerwise)  # fmt: skip
    notes: list[str] = []

    # decode: the highest rate whose TPOT meets the target
    cap_d, limit_d = decode_capacity(sd)
    d = decode_rates(sd, np.arange(1, cap_d + 1) * decode.dp)
    i_d, ok_d = _best(d["requests_per_s"], d["tpot_s"] <= (tpot_target_s or math.inf))
    if not ok_d:
        notes.append(
            f"no decode batch meets TPOT {tpot_target_s * 1e3:.1f} ms (best {d['tpot_s'][0] * 1e3:.1f})"
        )

    # prefill: the highest rate whose TTFT (+ exposed transfer + first decode step) meets the target
    cap_p, limit_p = batch_capacity(sp)
    top = max(min(cap_p, math.ceil(sp.memory.max_num_tokens / query.input_len)), 1)
    p = prefill_rates(sp, np.arange(1, top + 1) * prefill.dp)
    ttft = p["ttft_s"] + kv.exposed_s + d["step_s"][i_d]
    i_p, ok_p = _best(p["requests_per_s"], ttft <= (ttft_target_s or math.inf))
    if not ok_p:
        notes.append(f"no prefill batch meets TTFT {ttft_target_s * 1e3:.0f} ms (best {ttft[0] * 1e3:.0f})")
    r_p, r_d = float(p["requests_per_s"][i_p]), float(d["requests_per_s"][i_d])

    # the link: each sending rank's KV output against its bandwidth
    bw = links.up_Bps if kv.link == "scale-up" else links.out_Bps
    util = r_p / prefill.dp * kv.bytes_per_rank / bw
    if util > 1.0:
        notes.append(f"the {kv.link} link limits prefill: KV output is {util:.2f}x its bandwidth")
        r_p /= util
    kv = replace(kv, link_utilization=util)

    tpot = float(d["tpot_s"][i_d])
    first = float(ttft[i_p])
    if requests_per_s is not None:
        load = float(requests_per_s)
    elif concurrency is not None:
        load = concurrency / (first + (query.output_len - 1) / query.accepted_tokens * tpot)
    else:
        load = r_d
    n_p, n_d = math.ceil(load / r_p - 1e-9), math.ceil(load / r_d - 1e-9)
    g_p, g_d = n_p * prefill.gpus, n_d * decode.gpus
    gpus = g_p + g_d
    pw = WorkerEstimate(
        role="prefill", deployment=prefill, num_gpus=prefill.gpus, feasible=True, reason="",
        concurrency=int((i_p + 1) * prefill.dp),
        batch_per_rank=int(p["b"][i_p]), capacity=int(p["cap"][i_p]), limited_by=limit_p,
        step_time_s=float(p["step_s"][i_p]), ttft_s=float(p["ttft_s"][i_p]), tpot_s=math.nan,
        requests_per_s=r_p, input_tokens_per_s_per_gpu=r_p * query.input_len / prefill.gpus,
        output_tokens_per_s_per_gpu=0.0,
    )  # fmt: skip
    dw = WorkerEstimate(
        role="decode", deployment=decode, num_gpus=decode.gpus, feasible=True, reason="",
        concurrency=int((i_d + 1) * decode.dp), batch_per_rank=int(d["b"][i_d]),
        capacity=int(d["cap"][i_d]), limited_by=limit_d,
        step_time_s=float(d["step_s"][i_d]), ttft_s=math.nan, tpot_s=tpot, requests_per_s=r_d,
        input_tokens_per_s_per_gpu=0.0, output_tokens_per_s_per_gpu=float(d["out_gpu"][i_d]),
    )  # fmt: skip
    return DisaggEstimate(
        model=query.model.name,
        hardware=query.hardware.name,
        input_len=query.input_len,
        output_len=query.output_len,
        requests_per_s=load,
        prefill=pw,
        decode=dw,
        kv_transfer=kv,
        prefill_instances=n_p,
        decode_instances=n_d,
        prefill_gpus=g_p,
        decode_gpus=g_d,
        prefill_to_decode_gpus=g_p / g_d,
        balanced_ratio=(r_d / decode.gpus) / (r_p / prefill.gpus),
        ttft_s=first,
        tpot_s=tpot,
        output_tokens_per_s_per_gpu=load * query.output_len / gpus,
        total_tokens_per_s_per_gpu=load * (query.input_len + query.output_len) / gpus,
        output_tokens_per_s_per_user=query.accepted_tokens / float(d["step_s"][i_d]),
        meets_targets=ok_p and ok_d,
        notes=(*notes, *sp.notes, *(n for n in sd.notes if n not in sp.notes)),
    )
