"""Sensitivity analysis: rows checked against a directly computed single-layer quantization, the bf16
control, the ranking, an outlier layer that must come out on top, and input validation."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tenfold.engine import ConversionPolicy, QuantLinear, convert
from tenfold.engine.autoprecision.sensitivity import HEADER, sensitivity
from tenfold.formats.metrics import sqnr_db
from tenfold.train import GPT, MODEL_SIZES, TrainConfig, Trainer

CFG = MODEL_SIZES["tiny"]  # 2 blocks, d_model 64, d_ff 192
# eager quantization keeps the test free of torch.compile warm-up; everything else is convert's default
POLICY = ConversionPolicy(hp_last_blocks=0, quant_backend="eager")
LAYERS = [f"blocks.{i}.{n}" for i in range(2) for n in ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")]


@pytest.fixture(scope="module")
def trained() -> tuple[GPT, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The tiny reference GPT after 80 bf16 steps on the embedded corpus (~2 s), and 2 held-out batches:
    a trained model's loss responds to its outputs, a freshly initialised one's barely does."""
    cfg = TrainConfig(
        recipe="bf16",
        model="tiny",
        steps=80,
        batch_size=8,
        seq_len=32,
        warmup_steps=8,
        eval_every=0,
        max_corpus_bytes=200_000,
    )
    tr = Trainer(cfg)
    tr.run()
    return tr.model, [tr.dataset.batch("val", i, 4, 32, cfg.seed) for i in range(2)]


@pytest.fixture(scope="module")
def gpt_table(trained):
    model, data = copy.deepcopy(trained[0]), trained[1]
    before = {n: m for n, m in model.named_modules()}
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    table = sensitivity(model, data, candidates=("nvfp4", "mxfp8", "bf16"), policy=POLICY)
    return model, data, before, state, table


def test_model_is_left_as_it_was(gpt_table):
    model, _, before, state, _ = gpt_table
    assert {n: m for n, m in model.named_modules()} == before
    assert not any(isinstance(m, QuantLinear) for m in model.modules())
    assert model.training  # mode restored
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k


def test_every_eligible_layer_and_candidate_has_one_row_lm_head_skipped(gpt_table):
    _, _, _, _, t = gpt_table
    assert sorted((r.layer, r.candidate) for r in t.rows) == sorted(
        (n, c) for n in LAYERS for c in ("nvfp4", "mxfp8", "bf16")
    )
    assert {(n, c) for n, c, _ in t.skipped} == {("lm_head", c) for c in ("nvfp4", "mxfp8", "bf16")}
    assert all("excluded" in why for _, _, why in t.skipped)


def test_bf16_candidate_is_an_exact_control(gpt_table):
    _, _, _, _, t = gpt_table
    rows = t.rows_for("bf16")
    assert len(rows) == len(LAYERS)
    for r in rows:
        assert r.delta == 0.0 and r.rel_delta == 0.0 and r.loss == t.base_loss
        assert r.output_sqnr_db == math.inf
        assert r.to_dict()["output_sqnr_db"] is None
    # the quantizing candidates do change the output
    assert all(math.isfinite(r.output_sqnr_db) for r in t.rows_for("nvfp4"))


@pytest.mark.parametrize("layer,cand", [("blocks.0.mlp.fc1", "nvfp4"), ("blocks.1.attn.qkv", "mxfp8")])
def test_row_equals_a_directly_computed_single_layer_quantization(gpt_table, layer, cand):
    model, data, _, _, t = gpt_table
    ref = copy.deepcopy(model).eval()
    q = copy.deepcopy(model).eval()
    rep = convert(
        q, cand, policy=ConversionPolicy(include=(f"^{layer}$",), hp_last_blocks=0, quant_backend="eager")
    )
    assert [d.name for d in rep.converted] == [layer]
    base_losses, losses, base_out, out = [], [], [], []
    with torch.no_grad():
        for x, y in data:
            lb, lq = ref(x), q(x)
            base_losses.append(F.cross_entropy(lb.reshape(-1, lb.shape[-1]), y.reshape(-1)).item())
            losses.append(F.cross_entropy(lq.reshape(-1, lq.shape[-1]), y.reshape(-1)).item())
            base_out.append(lb.reshape(-1))
            out.append(lq.reshape(-1))
    base = sum(base_losses) / len(base_losses)
    loss = sum(losses) / len(losses)
    (row,) = [r for r in t.rows if r.layer == layer and r.candidate == cand]
    assert t.base_loss == base
    assert row.loss == loss
    assert row.delta == loss - base
    assert row.rel_delta == (loss - base) / base
    assert row.output_sqnr_db == sqnr_db(torch.cat(base_out), torch.cat(out))
    assert loss != base  # quantizing the layer did something


def test_rows_are_ranked_by_delta_descending(gpt_table):
    _, _, _, _, t = gpt_table
    deltas = [r.delta for r in t.rows]
    assert deltas == sorted(deltas, reverse=True)
    assert deltas[0] > 0  # some layer costs loss
    for c in t.candidates:
        sub = t.rows_for(c)
        assert [r.delta for r in sub] == sorted((r.delta for r in sub), reverse=True)


def test_gemm_flops_share_from_the_layer_shapes(gpt_table):
    _, _, _, _, t = gpt_table
    d, f, v = CFG.d_model, CFG.d_ff, CFG.vocab_size
    per_block = {"attn.qkv": d * 3 * d, "attn.proj": d * d, "mlp.fc1": d * 2 * f, "mlp.fc2": f * d}
    total = 2 * sum(per_block.values()) + d * v  # the LM head counts in the total, though not measured
    for r in t.rows:
        assert r.gemm_flops_share == pytest.approx(per_block[r.layer.split(".", 2)[2]] / total, rel=1e-12)


def test_to_dict_and_format(gpt_table):
    _, _, _, _, t = gpt_table
    d = t.to_dict()
    assert d["candidates"] == ["nvfp4", "mxfp8", "bf16"] and d["n_batches"] == 2
    assert [r["layer"] for r in d["rows"]] == [r.layer for r in t.rows]
    cells = t.cells(limit=3)
    assert len(cells) == 3 and all(len(c) == len(HEADER) for c in cells)
    assert cells[0][1] == t.rows[0].layer
    text = t.format(limit=5)
    assert len(text.splitlines()) == 1 + 1 + 5
    assert t.rows[0].layer in text.splitlines()[2]


def test_outlier_layer_ranks_most_sensitive_in_fp4(trained):
    """Move a factor 2^12 from norm2's weight of channels 5, 21, 37, 53 into those columns of
    blocks.0.mlp.fc1: the float model computes exactly the same function (powers of two), but every
    16-wide block of fc1's weight now holds a huge outlier (and its input a tiny channel), which FP4
    blocks cannot represent together with the rest of the block."""
    model, data = copy.deepcopy(trained[0]), trained[1]
    with torch.no_grad():
        base = [model(x) for x, _ in data]
        cols = [5, 21, 37, 53]
        model.blocks[0].norm2.weight[cols] *= 2.0**-12
        model.blocks[0].mlp.fc1.weight[:, cols] *= 2.0**12
        assert all(torch.equal(model(x), b) for (x, _), b in zip(data, base, strict=True))
    t = sensitivity(model, data, candidates=("nvfp4", "mxfp4", "mxfp8"), policy=POLICY)
    for c in ("nvfp4", "mxfp4"):
        rows = t.rows_for(c)
        assert rows[0].layer == "blocks.0.mlp.fc1", [(r.layer, r.delta) for r in rows[:3]]
        assert rows[0].delta > 5 * max(rows[1].delta, 1e-6)
        assert rows[0].output_sqnr_db == min(r.output_sqnr_db for r in rows)
    # MXFP8's E4M3 elements span the 2^12 outlier within a block: that layer is no longer the problem
    (mx,) = [r for r in t.rows_for("mxfp8") if r.layer == "blocks.0.mlp.fc1"]
    assert mx.delta < 0.1 * t.rows_for("nvfp4")[0].delta


def small_mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))


def mlp_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(8, 32, generator=g), torch.randint(0, 32, (8,), generator=g))]


def test_sequential_with_a_custom_loss():
    m = small_mlp()
    t = sensitivity(m, mlp_batches(), candidates=("mxfp8",), loss_fn=lambda out, y: out.square().mean())
    assert sorted(r.layer for r in t.rows) == ["0", "2"]
    x, _ = mlp_batches()[0]
    with torch.no_grad():
        assert t.base_loss == m(x).square().mean().item()


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"candidates": ("nvfp5",)}, "nvfp5"),
        ({"candidates": "nvfp4"}, "nvfp4"),
        ({"candidates": ()}, "candidates is empty"),
        ({"candidates": ("mxfp8", "mxfp8")}, "mxfp8"),
        ({"batches": []}, "batches is empty"),
        ({"batches": [torch.zeros(3)]}, r"batches\[0\]"),
        ({"batches": 3}, "int"),
        ({"policy": ConversionPolicy(include=("^nope$",))}, r"no eligible layers for candidates \['mxfp8'\]"),
        ({"policy": "strict"}, "str"),
        ({"loss_fn": 1.5}, "float"),
    ],
)
def test_bad_inputs_raise_naming_the_value(kwargs, match):
    args = {"batches": mlp_batches(), "candidates": ("mxfp8",), **kwargs}
    with pytest.raises(ValueError, match=match):
        sensitivity(small_mlp(), args.pop("batches"), **args)


def test_bad_model_and_unknown_rows_for():
    with pytest.raises(ValueError, match="Module"):
        sensitivity("model", mlp_batches())  # type: ignore[arg-type]
    t = sensitivity(small_mlp(), mlp_batches(), candidates=("mxfp8",))
    with pytest.raises(ValueError, match="nvfp4"):
        t.rows_for("nvfp4")


def test_the_package_exports_the_issue_api():
    import tenfold.engine as engine

    assert (
        engine.sensitivity is sensitivity
    )  # tenfold.engine.autoprecision.sensitivity(model, batches, candidates)
    assert {"auto_policy", "PrecisionPolicy", "Recorder"} <= set(engine.__all__)


def _grad(model, data):
    for p in model.parameters():
        p.grad = None
    for x, y in data:
        (F.cross_entropy(model(x).float().reshape(-1, 256), y.reshape(-1)) / len(data)).backward()
    return torch.cat([p.grad.reshape(-1) for _, p in model.named_parameters()])


def test_gradient_sqnr_matches_a_direct_backward_pass(trained):
    model, data = copy.deepcopy(trained[0]), trained[1]
    sentinel = {n: torch.full_like(p, 7.0) for n, p in model.named_parameters()}
    for n, p in model.named_parameters():
        p.grad = sentinel[n].clone()
    t = sensitivity(model, data, candidates=("mxfp8", "bf16"), policy=POLICY, gradients=True)
    for n, p in model.named_parameters():  # the caller's gradients are kept
        assert torch.equal(p.grad, sentinel[n]), n
    assert all(r.grad_sqnr_db == math.inf and r.grad_error == 0.0 for r in t.rows_for("bf16"))
    ref = _grad(copy.deepcopy(trained[0]).eval(), data)
    for layer in ("blocks.0.mlp.fc1", "blocks.1.attn.qkv"):
        m = copy.deepcopy(trained[0])
        pol = ConversionPolicy(include=(f"^{layer}$",), hp_last_blocks=0, quant_backend="eager")
        convert(m, "mxfp8", policy=pol)
        want = sqnr_db(ref, _grad(m.eval(), data))
        row = next(r for r in t.rows_for("mxfp8") if r.layer == layer)
        assert row.grad_sqnr_db == pytest.approx(want, abs=1e-6)
        assert row.grad_error == pytest.approx(10 ** (-want / 10), rel=1e-6)
    g = t.deltas("gradient")
    assert set(g) == set(LAYERS) and all(g[n]["bf16"] == 0.0 and g[n]["mxfp8"] > 0 for n in LAYERS)
    assert t.rows[0].to_dict()["grad_sqnr_db"] is not None


def test_gradient_score_needs_gradients(gpt_table):
    t = gpt_table[4]
    assert all(r.grad_sqnr_db is None for r in t.rows) and "-" in t.cells(1)[0]
    with pytest.raises(ValueError, match="gradients=True"):
        t.deltas("gradient")
    with pytest.raises(ValueError, match="score must be"):
        t.deltas("hessian")
