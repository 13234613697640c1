"""convert() on Hugging Face transformers models built from tiny configs (no weights downloaded): what is
quantized per class, routers and LM head kept with their reasons, and fused MoE experts held bit-exact to a
plain per-expert loop of QuantLinear layers."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

transformers = pytest.importorskip(
    "transformers", reason="the Hugging Face tests need transformers installed"
)

from tenfold.engine import PrecisionPolicy, QuantLinear, convert, recipe, sensitivity, update_scaling  # noqa: E402
from tenfold.engine.convert import ConversionPolicy, replace_module  # noqa: E402
from tenfold.engine.experts import ExpertGemm, QuantExperts, is_fused_experts  # noqa: E402

E, TOP_K, D, F, V = 4, 2, 64, 64, 256
COMMON = {
    "hidden_size": D,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": V,
    "intermediate_size": F,
}
MOE = {
    "Qwen3MoeForCausalLM": {"num_experts": E, "num_experts_per_tok": TOP_K, "moe_intermediate_size": F},
    "MixtralForCausalLM": {"num_local_experts": E, "num_experts_per_tok": TOP_K},
}
CLASSES = ("LlamaForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM")
ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")


def build(cls_name: str, seed: int = 0) -> nn.Module:
    cls = getattr(transformers, cls_name, None)
    if cls is None:
        pytest.skip(f"transformers {transformers.__version__} has no {cls_name}")
    config = getattr(transformers, cls_name.replace("ForCausalLM", "Config"))(
        **COMMON, **MOE.get(cls_name, {})
    )
    torch.manual_seed(seed)
    return cls(config).eval()


def loss_of(m: nn.Module, seed: int = 1) -> torch.Tensor:
    ids = torch.randint(0, V, (2, 16), generator=torch.Generator().manual_seed(seed))
    return m(ids, labels=ids).loss


def fused_experts(m: nn.Module) -> list[nn.Module]:
    return [mod for mod in m.modules() if is_fused_experts(mod)]


@pytest.mark.parametrize("cls_name", CLASSES)
@pytest.mark.parametrize("name", ["mxfp8", "nvfp4"])
def test_convert_quantizes_projections_and_keeps_router_and_lm_head(cls_name, name):
    m = build(cls_name)
    ref = copy.deepcopy(m)
    params = {id(p) for p in m.parameters()}
    keys = set(m.state_dict())
    moe = cls_name in MOE
    fused = bool(fused_experts(m))
    report = convert(m, name)
    d = {x.name: x for x in report.layers}
    # nvfp4 keeps its last ceil(0.125 x 2) = 1 block in high precision; mxfp8 keeps none
    quant_blocks = (0, 1) if name == "mxfp8" else (0,)
    assert report.n_blocks == 2 and report.hp_blocks == ((1,) if name == "nvfp4" else ())
    for b in (0, 1):
        for p in ATTN:
            assert d[f"model.layers.{b}.self_attn.{p}"].converted == (b in quant_blocks)
    assert "LM head" in d["lm_head"].reason and "2509.25149" in d["lm_head"].reason
    assert not d["lm_head"].converted
    if moe:
        for b in (0, 1):
            gate = d[f"model.layers.{b}.mlp.gate"]
            assert (
                not gate.converted and gate.reason.startswith("router gate") and "2412.19437" in gate.reason
            )
        per_layer = 2 * E if fused else 3 * E  # gate_up + down fused, or w1 w2 w3 per expert
        assert report.experts == per_layer * len(quant_blocks)
        assert len(report.moe_layers) == len(quant_blocks)
        assert f"{report.experts} expert GEMM weights in {len(quant_blocks)} MoE layers" in report.summary()
        assert report.to_dict()["experts"] == report.experts
        if fused:
            assert isinstance(m.model.layers[0].mlp.experts, QuantExperts)
            assert isinstance(m.model.layers[1].mlp.experts, QuantExperts) == (name == "mxfp8")
    else:
        assert report.experts == 0 and "expert" not in report.summary()
        assert all(d[f"model.layers.0.mlp.{p}"].converted for p in ("gate_proj", "up_proj", "down_proj"))
    # the original Parameters, under their original keys (quantization buffers are added)
    assert {id(p) for p in m.parameters()} == params and keys <= set(m.state_dict())
    seeds = [int(q.sr_seed) for q in m.modules() if isinstance(q, QuantLinear)]
    assert len(seeds) == len(set(seeds)) > 0
    m.train()
    loss = loss_of(m)
    loss.backward()
    grads = [p.grad for p in m.parameters() if p.requires_grad]
    assert torch.isfinite(loss) and all(g is not None and torch.isfinite(g).all() for g in grads)
    want = loss_of(ref)
    assert (loss - want).abs() < 0.05 * want.abs()


@pytest.mark.parametrize("cls_name", CLASSES)
def test_bf16_recipe_leaves_the_model_exact(cls_name):
    m = build(cls_name)
    ref = copy.deepcopy(m)
    report = convert(m, "bf16")
    assert not report.converted and all("quantizes nothing" in x.reason for x in report.kept)
    assert torch.equal(loss_of(m), loss_of(ref))


@pytest.mark.parametrize("cls_name", ["Qwen3MoeForCausalLM", "MixtralForCausalLM"])
def test_wrapped_experts_keep_the_hf_routing_exactly(cls_name):
    """QuantExperts under bf16 (no quantization) in place of every HF experts module: logits and every
    gradient bit-identical to the unconverted model running HF's eager experts loop, so routing, activation
    and combine are the HF math. (HF's default grouped_mm path batches the expert GEMMs and rounds
    differently, so the exact comparison is with the eager path.)"""
    m = build(cls_name)
    if not fused_experts(m):
        pytest.skip("this transformers stores experts as per-expert nn.Linear modules")
    ref = copy.deepcopy(m)
    for name, mod in list(m.named_modules()):
        if is_fused_experts(mod):
            replace_module(m, name, QuantExperts.wrap(mod, recipe("bf16")))
    assert isinstance(m.model.layers[1].mlp.experts, QuantExperts)
    if hasattr(ref, "set_experts_implementation"):
        ref.set_experts_implementation("eager")
    m.train(), ref.train()
    a, b = loss_of(m), loss_of(ref)
    a.backward(), b.backward()
    assert torch.equal(a, b)
    for (n, p), q in zip(m.named_parameters(), ref.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad), n


def reference_layers(experts: nn.Module, recipe_name: str, seed: int) -> dict[tuple[str, int], QuantLinear]:
    """One QuantLinear per (projection, expert) on a copy of that expert's weight; seeds seed, seed + 1, ...
    over the gate_up_proj experts, then the down_proj experts."""
    r = recipe(recipe_name)
    n = experts.gate_up_proj.shape[0]
    layers = {}
    for k, (p, e) in enumerate((p, e) for p in ("gate_up_proj", "down_proj") for e in range(n)):
        w = getattr(experts, p)[e].detach().clone()
        lin = nn.Linear(w.shape[1], w.shape[0], bias=False)
        lin.weight = nn.Parameter(w)
        layers[p, e] = QuantLinear.from_linear(lin, r, seed=seed + k)
    return layers


def run_reference(layers, act_fn, x, idx, weights) -> torch.Tensor:
    """The plain loop: each expert takes its tokens in (top-k slot, token) order, runs its two QuantLinear
    layers, and its weighted output is added back, expert by expert; experts with no tokens are skipped."""
    out = torch.zeros_like(x)
    for e in range(len(layers) // 2):
        rows = [(s, t) for s in range(idx.shape[1]) for t in range(idx.shape[0]) if int(idx[t, s]) == e]
        if not rows:
            continue
        slot = torch.tensor([s for s, _ in rows])
        tok = torch.tensor([t for _, t in rows])
        gate, up = layers["gate_up_proj", e](x[tok]).chunk(2, dim=-1)
        y = layers["down_proj", e](act_fn(gate) * up) * weights[tok, slot, None]
        out.index_add_(0, tok, y)
    return out


@pytest.mark.parametrize("recipe_name", ["mxfp8", "nvfp4", "fp8_delayed"])
def test_fused_experts_are_bit_exact_to_a_per_expert_quant_linear_loop(recipe_name):
    """Forward, dx, d(routing weights), every expert's dW, SR counters and amax histories, over two steps
    (the second with advanced stochastic-rounding counters and updated delayed scales)."""
    m = build("MixtralForCausalLM")
    experts = m.model.layers[0].mlp.experts
    if not is_fused_experts(experts):
        pytest.skip("this transformers stores experts as per-expert nn.Linear modules")
    g = torch.Generator().manual_seed(3)
    T = 40
    x = torch.randn(T, D, generator=g)
    # top-2 of experts 0..2 per token: expert 3 gets no tokens and must be skipped by both
    idx = torch.stack([torch.randperm(E - 1, generator=g)[:TOP_K] for _ in range(T)])
    w = torch.softmax(torch.randn(T, TOP_K, generator=g), -1)
    dy = torch.randn(T, D, generator=g)
    qe = QuantExperts.wrap(experts, recipe(recipe_name), seed=7)
    layers = reference_layers(experts, recipe_name, seed=7)
    assert qe.n_gemms == 2 * E and all(isinstance(q, ExpertGemm) for q in qe.gemms["down_proj"])
    for _ in range(2):
        xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
        xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
        experts.gate_up_proj.grad = experts.down_proj.grad = None
        out = qe(xs, idx, ws)
        ref = run_reference(layers, experts.act_fn, xr, idx, wr)
        assert torch.equal(out, ref)
        (out * dy).sum().backward()
        (ref * dy).sum().backward()
        assert torch.equal(xs.grad, xr.grad) and torch.equal(ws.grad, wr.grad)
        for p in ("gate_up_proj", "down_proj"):
            fused = getattr(qe, p).grad
            for e in range(E):
                lin, gemm = layers[p, e], qe.gemms[p][e]
                want = torch.zeros_like(fused[e]) if lin.weight.grad is None else lin.weight.grad
                assert torch.equal(fused[e], want), (p, e)
                lin.weight.grad = None
                assert int(gemm.sr_seed) == int(lin.sr_seed) == 7 + (p == "down_proj") * E + e
                assert int(gemm.sr_step) == int(lin.sr_step)
                if gemm.amax_history is not None:
                    assert torch.equal(gemm.amax_history, lin.amax_history)
        update_scaling(qe)
        for lin in layers.values():
            lin.update_scaling()
    assert not torch.equal(out, run_reference(layers, experts.act_fn, x, idx, w) * 0)  # not vacuous
    if recipe_name == "nvfp4":  # stochastic rounding of dy: the counters advanced, except the idle expert's
        assert [int(q.sr_step) for q in qe.gemms["gate_up_proj"]] == [2, 2, 2, 0]


class OldMixtralBlock(nn.Module):
    """The layout of transformers < 5 Mixtral MoE blocks, defined locally: an nn.Linear router named gate
    and a ModuleList of experts, each with its own w1 (gate), w3 (up) and w2 (down) nn.Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(D, E, bias=False)
        self.experts = nn.ModuleList(
            nn.ModuleDict(
                {
                    "w1": nn.Linear(D, F, bias=False),
                    "w3": nn.Linear(D, F, bias=False),
                    "w2": nn.Linear(F, D, bias=False),
                }
            )
            for _ in range(E)
        )


class OldMixtral(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.ModuleDict({"block_sparse_moe": OldMixtralBlock()}) for _ in range(2))
        self.lm_head = nn.Linear(D, V)


def test_per_expert_linear_experts_convert_and_are_counted():
    m = OldMixtral()
    report = convert(m, "mxfp8")
    d = {x.name: x for x in report.layers}
    assert report.experts == 2 * 3 * E and len(report.moe_layers) == 2
    assert report.moe_layers[0] == "layers.0.block_sparse_moe.experts"
    assert (
        d["layers.1.block_sparse_moe.experts.3.w2"].converted
        and d["layers.1.block_sparse_moe.experts.3.w2"].experts == 1
    )
    assert d["layers.0.block_sparse_moe.gate"].reason.startswith("router gate")
    assert isinstance(m.layers[0]["block_sparse_moe"].gate, nn.Linear)
    assert f"{2 * 3 * E} expert GEMM weights in 2 MoE layers" in report.summary()
    # routers opt in with keep_routers=False (a 4-wide router then needs the block-fit check off)
    m = OldMixtral()
    report = convert(m, "mxfp8", policy=ConversionPolicy(keep_routers=False, require_block_fit=False))
    assert isinstance(m.layers[0]["block_sparse_moe"].gate, QuantLinear)


def test_fused_router_modules_are_reported_and_never_swapped():
    m = build("Qwen3MoeForCausalLM")
    if not fused_experts(m):
        pytest.skip("this transformers stores experts as per-expert nn.Linear modules")
    router = m.model.layers[0].mlp.gate
    report = convert(m, "mxfp8", policy=ConversionPolicy(keep_routers=False))
    d = {x.name: x for x in report.layers}
    assert (
        d["model.layers.0.mlp.gate"].kind == "Router"
        and "not a linear layer" in d["model.layers.0.mlp.gate"].reason
    )
    assert m.model.layers[0].mlp.gate is router
    assert d["model.layers.0.mlp.experts.down_proj"].experts == E
    assert d["model.layers.0.mlp.experts.gate_up_proj"].backend.startswith("emulated")


def test_delayed_scaling_and_optimizer_reach_the_experts():
    m = build("MixtralForCausalLM")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    report = convert(m, "fp8_delayed")
    assert report.experts == 2 * 2 * E
    m.train()
    loss_of(m).backward()
    experts = m.model.layers[0].mlp.experts
    before = experts.down_proj.detach().clone()
    opt.step()
    assert not torch.equal(before, experts.down_proj)
    gemm = experts.gemms["gate_up_proj"][0] if isinstance(experts, QuantExperts) else None
    if gemm is not None:
        assert float(gemm.amax_history[0, 0]) > 0
        update_scaling(m)
        assert float(gemm.scale[0]) != 1.0 and float(gemm.amax_history[0, 0]) == 0
        twin = copy.deepcopy(m)  # each ExpertGemm reads its weight from its own (copied) experts module
        twin_experts = twin.model.layers[0].mlp.experts
        assert twin_experts.gemms["down_proj"][1].weight.data_ptr() == twin_experts.down_proj[1].data_ptr()
        assert twin_experts.down_proj.data_ptr() != experts.down_proj.data_ptr()
        sd = m.state_dict()
        assert "model.layers.0.mlp.experts.gate_up_proj" in sd
        assert "model.layers.0.mlp.experts.gemms.gate_up_proj.0.amax_history" in sd


def test_wrap_rejects_what_it_cannot_emulate():
    m = build("MixtralForCausalLM")
    experts = m.model.layers[0].mlp.experts
    if not is_fused_experts(experts):
        pytest.skip("this transformers stores experts as per-expert nn.Linear modules")
    with pytest.raises(ValueError, match="up_proj"):
        QuantExperts.wrap(experts, recipe("mxfp8"), projections=("up_proj",))
    with pytest.raises(ValueError, match="no fused"):
        QuantExperts.wrap(nn.Linear(4, 4), recipe("mxfp8"))
    experts.is_transposed = True
    with pytest.raises(ValueError, match="is_transposed"):
        QuantExperts.wrap(experts, recipe("mxfp8"))
    report = convert(m, "mxfp8")
    assert (
        "is_transposed" in {x.name: x for x in report.layers}["model.layers.0.mlp.experts.down_proj"].reason
    )


class Logits(nn.Module):
    """(ids) -> flat logits, the interface `sensitivity` expects."""

    def __init__(self, m: nn.Module) -> None:
        super().__init__()
        self.m = m

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.m(ids).logits.reshape(-1, V)


def test_sensitivity_measures_fused_experts_and_restores_them():
    m = build("MixtralForCausalLM")
    if not fused_experts(m):
        pytest.skip("this transformers stores experts as per-expert nn.Linear modules")
    originals = dict(m.named_modules())
    ids = torch.randint(0, V, (1, 16), generator=torch.Generator().manual_seed(0))
    policy = ConversionPolicy(include=(r"layers\.0\.mlp",))
    table = sensitivity(Logits(m), [(ids, ids.reshape(-1))], candidates=("mxfp8",), policy=policy)
    rows = {r.layer for r in table.rows_for("mxfp8")}
    assert rows == {f"m.model.layers.0.mlp.experts.{p}" for p in ("gate_up_proj", "down_proj")}
    skipped = {n: why for n, _, why in table.skipped}
    assert skipped["m.model.layers.0.mlp.gate"].startswith("router gate")
    assert all(m.get_submodule(n) is mod for n, mod in originals.items())


def test_a_per_layer_policy_can_give_the_two_expert_projections_different_formats():
    m = build("Qwen3MoeForCausalLM")
    if not fused_experts(m):
        pytest.skip("this transformers stores experts as per-expert nn.Linear modules")
    base = "model.layers.0.mlp.experts"
    pp = PrecisionPolicy(layers={f"{base}.gate_up_proj": "nvfp4", f"{base}.down_proj": "mxfp8"})
    report = convert(m, pp)
    assert {d.name for d in report.converted} == {f"{base}.gate_up_proj", f"{base}.down_proj"}
    experts = m.get_submodule(base)
    assert experts.gemms["gate_up_proj"][0].recipe.name == "nvfp4"
    assert experts.gemms["down_proj"][3].recipe.name == "mxfp8" and experts.n_gemms == 2 * E
    assert report.experts == 2 * E and not isinstance(m.model.layers[1].mlp.experts, QuantExperts)
    m.train()
    loss = loss_of(m)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(experts.down_proj.grad).all()
