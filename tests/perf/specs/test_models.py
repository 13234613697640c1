"""Model catalog: parameter counts computed from the architecture match the published counts."""

import pytest

from tenfold.perf import list_models, load_model
from tenfold.perf.specs.models import find_model

# (name, published total in billions, relative tolerance): the Megatron family's table rounds to 0.1B.
TOTALS = [(n, load_model(n).published_params / 1e9) for n in list_models() if load_model(n).published_params]


@pytest.mark.parametrize(("name", "published"), TOTALS)
def test_total_parameters_match_published(name, published):
    m = load_model(name)
    got = m.total_params() / 1e9
    if name.startswith("megatron-gpt-") and published < 10:
        assert round(got, 1) == published  # Narayanan Table 1 prints one decimal
    elif name == "gpt-moe-1.8t":
        assert got == pytest.approx(published, rel=0.02)  # architecture assumed, only "1.8T" published
    else:
        assert got == pytest.approx(published, rel=0.005)


@pytest.mark.parametrize(
    ("name", "convention", "rel"),
    [
        ("deepseek-v3", "all", 0.02),  # 37B activated
        ("mixtral-8x7b", "all", 0.005),  # 12.9B per token
        ("qwen3-30b-a3b", "all", 0.02),  # 3.3B activated
        ("qwen3-235b-a22b", "all", 0.01),  # 22B activated
        ("gpt-oss-120b", "no_input_embedding", 0.005),  # 5.13B active (unembedding counted, lookup not)
    ],
)
def test_active_parameters_match_published(name, convention, rel):
    m = load_model(name)
    got = m.active_params(input_embedding=convention == "all")
    assert got == pytest.approx(m.published_active, rel=rel)


def test_megatron_family_follows_narayanan_formula():
    # P = 12lh^2 (1 + 13/(12h) + (V + s)/(12lh)), Narayanan et al. 2021 §5.1; our count adds the final norm.
    for name in list_models():
        if not name.startswith("megatron-gpt-"):
            continue
        m = load_model(name)
        l, h, v, s = m.layers, m.hidden, m.vocab, m.max_position
        formula = 12 * l * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * l * h))
        assert m.total_params() == pytest.approx(formula + 2 * h, rel=1e-12)


def test_shapes_are_counted_correctly():
    llama = load_model("llama3-70b")  # GQA: K and V are h x 8·128
    assert llama.attention_matmul_params() == 2 * 8192 * 8192 + 2 * 8192 * 1024
    assert llama.mlp_matmul_params(llama.ffn) == 3 * 8192 * 28672  # SwiGLU: three matrices
    ds = load_model("deepseek-v3")
    assert ds.is_mla and ds.moe_layers == 58 and ds.n_dense_layers == 3
    assert ds.attention_matmul_params() == (
        7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    )
    assert ds.expert_params() == 3 * 7168 * 2048
    assert 11e9 < ds.mtp_params() < 15e9  # the report's 14B MTP module incl. its own head/embedding
    nem = load_model("nemotron-4-340b")  # squared ReLU: two matrices
    assert nem.mlp_matmul_params(nem.ffn) == 2 * 18432 * 73728


def test_aliases_match_validation_names():
    assert find_model("Llama-3.1-405B").name == "llama3.1-405b"
    assert find_model("MT-NLG-530B").name == "mt-nlg-530b"
    assert find_model("Megatron-GPT-1T").name == "megatron-gpt-1t"
    assert find_model("no such model") is None


def test_bad_model_fields_raise():
    m = load_model("llama3-8b")
    from dataclasses import replace

    with pytest.raises(ValueError, match="kv_heads=7"):
        replace(m, kv_heads=7)
    with pytest.raises(ValueError, match="activation"):
        replace(m, activation="tanh")
