"""NVIDIA's claims and the article's estimate (through `tenfold claims --json`, run once), and the model's
per-GPU speedups against measured Megatron-Bridge pairs."""

import json
import math
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tenfold.cli.main import app
from tenfold.cost.claims.speedups import load_speedup_pairs, speedup_checks
from tenfold.perf.specs.hardware import load_hardware


@pytest.fixture(scope="module")
def claims():
    out = CliRunner().invoke(app, ["claims", "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def _check_decomposition(d):
    product = math.prod(f["value"] for f in d["factors"])
    assert product == pytest.approx(d["model_ratio"], rel=1e-9)
    assert d["product_of_factors"] == pytest.approx(product)
    h100, gb200 = load_hardware("h100-sxm"), load_hardware("gb200")
    spec = next(f for f in d["factors"] if f["name"] == "per-GPU spec ratio")
    assert (
        spec["value"] == pytest.approx(gb200.peak("fp8") / h100.peak("fp8")) and spec["source"] == "datasheet"
    )
    steps = d["steps"]
    assert steps[0]["hardware"] == "h100-sxm" and steps[0]["domain"] == 8
    assert steps[1]["hardware"] == "gb200" and steps[1]["domain"] == 8  # the counterfactual
    assert steps[2]["domain"] == 72
    assert d["model_ratio"] == pytest.approx(
        steps[-1]["tokens_per_s_per_gpu"] / steps[0]["tokens_per_s_per_gpu"]
    )


def test_training_claim_is_decomposed_under_its_conditions(claims):
    d = claims["training"]
    assert d["claimed"] == 4.0 and "32,768 GPUs" in d["conditions"] and "FP8 on both" in d["conditions"]
    _check_decomposition(d)
    assert [f["name"] for f in d["factors"]][:3] == ["per-GPU spec ratio", "precision", "scale-up domain"]
    assert next(f for f in d["factors"] if f["name"] == "precision")["value"] == 1.0


def test_inference_claim_is_decomposed_and_swept(claims):
    inf = claims["inference"]
    d = inf["decomposition"]
    assert d["claimed"] == 30.0 and "ISL 32,768" in d["conditions"]
    _check_decomposition(d)
    prec = next(f for f in d["factors"] if f["name"] == "precision")
    assert prec["value"] == pytest.approx(2.0)  # NVFP4 vs FP8 dense peak on GB200
    if not inf["h100_reaches_target"]:
        assert inf["evaluated_tokens_per_s_per_user"] <= inf["h100_max_tokens_per_s_per_user"]
        assert "cannot reach" in d["notes"][0]
    ratios = [s["ratio"] for s in inf["sweep"]]
    assert ratios and all(r > 1 for r in ratios)
    # the gap grows toward H100's interactivity ceiling: the 30x is a single operating point
    assert ratios[-1] >= ratios[0]


def test_article_statements_and_what_they_hold_fixed(claims):
    article = claims["article"]
    implied = {c["statement"]: c["implied_speedup"] for c in article["checks"]}
    assert implied["B200 gives 4x the effective compute of H100"] == 4.0
    assert implied["a 3-month run takes 3 weeks"] == pytest.approx(13 / 3)
    assert implied["with 60 % of the GPUs"] == pytest.approx(1 / 0.6)
    assert implied["3 weeks and 60 % of the GPUs together"] == pytest.approx(13 / 3 / 0.6)
    assert article["speedup"]["fp8"] == pytest.approx(article["h100_days"] / article["b200_days"]["fp8"])
    assert article["speedup"]["nvfp4"] > article["speedup"]["fp8"]
    n = article["gpus_for_equal_time"]["fp8"]
    assert n is None or n <= article["num_gpus"]


def test_gb200_fp8_speedup_within_15_percent_of_megatron_bridge():
    """The issue's check: the model's per-GPU FP8 speedup of GB200 over H100 for Llama 3 70B and 405B,
    each at the measured runs' GPU counts and batches, within 15 % of the measured ratio."""
    pairs = [p for p in load_speedup_pairs() if p.target.gpu == "gb200" and p.target_precision == "fp8"]
    assert {p.model for p in pairs} == {"llama3-70b", "llama3.1-405b"}
    for c in speedup_checks(pairs):
        assert abs(c.error) <= 0.15, (c.pair.name, c.pair.measured, c.predicted)


def test_measured_pairs_in_the_data_file_match_their_runs():
    by = {p.name: p for p in load_speedup_pairs()}
    p = by["Llama 3.1 405B FP8, GB200 vs H100 (25.11)"]
    assert p.measured == pytest.approx(813 / 292)  # Megatron-Bridge 25.11 performance summary: 2.78x
    assert by["Llama 3 70B FP8, GB200 vs H100 (25.11)"].measured == pytest.approx(2.69, abs=0.01)


def test_gpt_moe_1_8t_shape_fits_an_hgx_node_and_the_published_totals():
    """The 30x chain's model: NVIDIA's 16 experts, top-2, gated (aiconfigurator's GPT-MoE-1.8T MoE layer),
    1.8T in total and ~280B active; its heads split over the 8 GPUs of one HGX node (the earlier 84-head
    guess forced TP28 across 3.5 nodes)."""
    from tenfold.perf import load_model
    from tenfold.perf.serving.search import deployments

    m = load_model("gpt-moe-1.8t")
    assert (m.experts, m.topk, m.gated, m.layers) == (16, 2, True, 120)
    assert m.total_params() / 1e12 == pytest.approx(1.8, rel=0.01)
    assert m.active_params() / 1e9 == pytest.approx(280, rel=0.03)
    tps = {d.tp for d in deployments(m, 8) if d.dp == 1}
    assert 8 in tps and m.heads % 8 == 0


COST_DOC = Path(__file__).resolve().parents[3] / "docs" / "cost.md"


def _doc_rows(header: str) -> list[list[str]]:
    """Cells of the markdown table in docs/cost.md whose header row starts with `header`."""
    lines = COST_DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def _x(cell: str) -> float:
    return float(re.match(r"[\d.]+", cell).group())


def test_docs_state_the_claims_chain_the_command_prints(claims):
    """docs/cost.md's training chain (model ratio and its four factors) is what `tenfold claims` prints
    today, to the two decimals shown: a refit that moves it must move the docs too."""
    row = next(r for r in _doc_rows("| claim | claimed | model |") if r[0].startswith("4×"))
    d = claims["training"]
    factors = [f["value"] for f in d["factors"]]
    assert [_x(c) for c in row[2:7]] == [round(v, 2) for v in [d["model_ratio"], *factors]]


def test_docs_state_the_measured_pairs_the_command_prints(claims):
    """docs/cost.md's "Against measurement" table: every pair's model ratio and error as printed today."""
    doc = {r[0]: r for r in _doc_rows("| pair | measured | model | error |")}
    assert set(doc) == {m["pair"]["name"] for m in claims["measured"]}
    for m in claims["measured"]:
        r = doc[m["pair"]["name"]]
        assert _x(r[1]) == round(m["measured"], 2) and _x(r[2]) == round(m["predicted"], 2), r
        sign = -1.0 if r[3].startswith("−") else 1.0
        assert sign * _x(r[3].lstrip("−+")) == pytest.approx(round(m["error"] * 100, 1), abs=0.051), r
