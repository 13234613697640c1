"""Results of the disaggregated prefill/decode model (disagg.py) as frozen dataclasses: one worker of each
kind (`WorkerEstimate`), the KV transfer between them (`KVTransfer`) and a whole P/D deployment sized for a
load (`DisaggEstimate`). Seconds inside; `to_dict` gives latencies in milliseconds, as the other serving
results do."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from tenfold.perf.errors import Infeasible
from tenfold.perf.serving.results import Deployment, latencies_in_ms

ROLES = ("prefill", "decode")


@dataclass(frozen=True, kw_only=True)
class WorkerEstimate:
    """One prefill-only or decode-only instance at one load. Rates are NaN when infeasible.

    role: "prefill" or "decode"; concurrency: requests in flight on the instance (prefill: prompts
    waiting or running; decode: sequences generating); batch_per_rank: sequences (decode) or prompts
    (prefill) one attention rank runs per step; capacity and limited_by: the most it runs at once and
    what sets it; step_time_s: one engine step; ttft_s: prefill time of a prompt including the wait for
    a slot (prefill workers; NaN for decode); tpot_s: seconds per output token (decode; NaN for prefill);
    requests_per_s: requests the instance finishes per second; input/output_tokens_per_s_per_gpu: the
    prompt tokens a prefill worker processes, the tokens a decode worker generates, per GPU.
    """

    role: str
    deployment: Deployment
    num_gpus: int
    feasible: bool
    reason: str
    concurrency: int
    batch_per_rank: int
    capacity: int
    limited_by: str
    step_time_s: float
    ttft_s: float
    tpot_s: float
    requests_per_s: float
    input_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_gpu: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    def raise_if_infeasible(self) -> WorkerEstimate:
        if not self.feasible:
            raise Infeasible(f"{self.role} worker: {self.reason}")
        return self

    def to_dict(self) -> dict:
        d = latencies_in_ms(asdict(self))
        d["notes"] = list(self.notes)
        return d


@dataclass(frozen=True, kw_only=True)
class KVTransfer:
    """The prompt's KV cache moving from a prefill to a decode instance, per request.

    link: "scale-up" (NVLink inside one domain) or "network"; bytes_per_request: the prompt's KV bytes
    over all layers and ranks; bytes_per_rank: what one sending rank moves; seconds: the whole transfer;
    exposed_s: the part a request waits for (all of it, or the last layer's share when transfer is
    layer-by-layer); link_utilization: the prefill pool's KV output over its links' bandwidth at the
    planned load (> 1 means the link, not the GPUs, limits prefill).
    """

    link: str
    layerwise: bool
    bytes_per_request: float
    bytes_per_rank: float
    seconds: float
    exposed_s: float
    link_utilization: float = 0.0


@dataclass(frozen=True, kw_only=True)
class DisaggEstimate:
    """A P/D deployment sized for a load: instances and GPUs of each pool, latencies and rates.

    requests_per_s: the load served; prefill_instances / decode_instances and their GPUs;
    prefill_to_decode_gpus: the ratio of the pools' GPUs (the balanced one, before rounding up to
    whole instances, is `balanced_ratio`); ttft_s = prefill TTFT + exposed KV transfer + one decode step;
    tpot_s: the decode worker's; output/total_tokens_per_s_per_gpu: over both pools' GPUs;
    meets_targets: whether the TTFT and TPOT targets hold (False with the reason in `notes` when no
    operating point meets them).
    """

    model: str
    hardware: str
    input_len: int
    output_len: int
    requests_per_s: float
    prefill: WorkerEstimate
    decode: WorkerEstimate
    kv_transfer: KVTransfer
    prefill_instances: int
    decode_instances: int
    prefill_gpus: int
    decode_gpus: int
    prefill_to_decode_gpus: float
    balanced_ratio: float
    ttft_s: float
    tpot_s: float
    output_tokens_per_s_per_gpu: float
    total_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_user: float
    meets_targets: bool
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def num_gpus(self) -> int:
        return self.prefill_gpus + self.decode_gpus

    def to_dict(self) -> dict:
        d = latencies_in_ms(asdict(self))
        d["prefill"] = self.prefill.to_dict()
        d["decode"] = self.decode.to_dict()
        kv = asdict(self.kv_transfer)
        kv["ms"], kv["exposed_ms"] = kv.pop("seconds") * 1e3, kv.pop("exposed_s") * 1e3
        d["kv_transfer"] = kv
        d["num_gpus"] = self.num_gpus
        d["notes"] = list(self.notes)
        return d
