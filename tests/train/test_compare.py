"""Recipe specs with overrides, TrainConfig.recipe_options, and the paired statistics over seeds
(tenfold.train.compare, used by benchmarks/convergence.py)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict

import pytest

from tenfold.stats import paired_difference, sample_std, t_quantile_975
from tenfold.train import ByteDataset, TrainConfig, Trainer
from tenfold.train.compare import format_recipe_spec, parse_recipe_spec, parse_value, split_specs

TINY = {"n_layers": 4, "d_model": 32, "n_heads": 2, "d_ff": 64, "seq_len": 16}


def test_values_parse_as_bool_int_float_then_text():
    assert parse_value("true") is True and parse_value("False") is False
    assert parse_value("0") == 0 and isinstance(parse_value("0"), int)
    assert parse_value("0.25") == 0.25 and parse_value("1e-3") == 0.001
    assert parse_value("hopper_fp8") == "hopper_fp8"


def test_recipe_specs_parse_to_a_name_and_sorted_options():
    assert parse_recipe_spec("nvfp4") == ("nvfp4", ())
    assert parse_recipe_spec("fp8_block:promote_interval=0,accumulate=hopper_fp8") == (
        "fp8_block",
        (("accumulate", "hopper_fp8"), ("promote_interval", 0)),
    )
    assert parse_recipe_spec(" nvfp4:hp_tail=0.25 ") == ("nvfp4", (("hp_tail", 0.25),))
    spec = "fp8_block:accumulate=hopper_fp8,promote_interval=0"
    assert (
        format_recipe_spec(*parse_recipe_spec("fp8_block:promote_interval=0,accumulate=hopper_fp8")) == spec
    )
    assert format_recipe_spec("bf16") == "bf16"


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (":hp_tail=0.25", "no recipe name"),
        ("nvfp4:hp_tail", "not field=value"),
        ("nvfp4:=0.25", "not field=value"),
        ("nvfp4:hp_tail=", "not field=value"),
        ("nvfp4:hp_tail=0.25,hp_tail=0.5", "given twice"),
    ],
)
def test_malformed_specs_are_value_errors_naming_them(spec, match):
    with pytest.raises(ValueError, match=match):
        parse_recipe_spec(spec)


def test_a_recipe_list_attaches_options_to_the_spec_before_them():
    text = "bf16,fp8_block:accumulate=hopper_fp8,promote_interval=0,nvfp4,nvfp4:hp_tail=0.25"
    assert split_specs(text) == [
        "bf16",
        "fp8_block:accumulate=hopper_fp8,promote_interval=0",
        "nvfp4",
        "nvfp4:hp_tail=0.25",
    ]
    assert split_specs("bf16; mxfp8  nvfp4") == ["bf16", "mxfp8", "nvfp4"]
    with pytest.raises(ValueError, match="starts with an option"):
        split_specs("hp_tail=0.25,nvfp4")


def test_train_config_carries_recipe_options_and_builds_the_recipe_with_them():
    cfg = TrainConfig(recipe="nvfp4", recipe_options={"margin": 1, "hp_tail": 0.5})
    assert cfg.recipe_options == (("hp_tail", 0.5), ("margin", 1))
    r = cfg.build_recipe()
    assert (r.hp_tail, r.margin, r.seed) == (0.5, 1, cfg.seed)
    assert cfg.label == "nvfp4:hp_tail=0.5,margin=1"
    # checkpoints and weights files store asdict(config); JSON turns the pairs into lists
    assert TrainConfig(**json.loads(json.dumps(asdict(cfg)))) == cfg
    assert TrainConfig(recipe="nvfp4").label == "nvfp4"


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ((("bogus", 1),), "bogus"),
        ((("hp_tail", 2.0),), "hp_tail must be in"),
        ((("hp_tail", "x"),), "bad recipe_options"),
        ((("seed", 1),), "seed"),
        ((("margin", 1), ("margin", 2)), "twice"),
        ((1, 2), "pairs"),
    ],
)
def test_bad_recipe_options_are_value_errors_naming_them(options, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(recipe="nvfp4", recipe_options=options)


def test_recipe_options_do_not_combine_with_a_policy_file():
    with pytest.raises(ValueError, match="replaces it"):
        TrainConfig(recipe="nvfp4", recipe_options={"hp_tail": 0.5}, policy="p.toml")


def test_the_trainer_converts_with_the_overridden_recipe():
    data = ByteDataset.from_bytes(bytes(range(256)) * 20)
    cfg = TrainConfig(recipe="nvfp4", recipe_options={"hp_tail": 0.5}, **TINY)
    tail = Trainer(cfg, dataset=data)
    # nvfp4 keeps ceil(0.125 * 4) = 1 block by default; ceil(0.5 * 4) = 2 with the override
    assert list(tail.conversion.hp_blocks) == [2, 3]
    assert tail.conversion.recipe == "nvfp4"


def test_t_quantiles_match_the_printed_table():
    # Student-t 0.975 quantiles, NIST/SEMATECH e-Handbook table 1.3.6.7.2
    for df, t in ((1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (30, 2.042)):
        assert t_quantile_975(df) == pytest.approx(t, abs=5e-4)
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile_975(0)


def test_paired_difference_on_a_hand_made_example():
    # d = (0.1, 0.2, 0.1): mean 2/15, sd = sqrt(((-1/30)^2 + (2/30)^2 + (-1/30)^2) / 2) = 1/sqrt(300),
    # SE = sd / sqrt(3) = 1/30; t_0.975(2) * SE = 0.1434 > 0.1333, so the t interval holds 0 although
    # |mean| > 2 SE: with three seeds, 2 SE would call it "worse".
    p = paired_difference([3.0, 3.2, 3.1], [2.9, 3.0, 3.0])
    assert p.n == 3
    assert p.mean == pytest.approx(2 / 15)
    assert p.se == pytest.approx(1 / 30)
    assert p.half_width == pytest.approx(4.302653 / 30, rel=1e-6)
    assert p.low < 0 < p.high and abs(p.mean) > 2 * p.se
    assert p.verdict == "indistinguishable"


def test_verdicts_follow_the_sign_when_the_interval_excludes_zero():
    # d = (0.10, 0.11, 0.12): mean 0.11, sd 0.01, SE 0.01/sqrt(3); half-width 4.3027 * 0.005774 = 0.0248
    worse = paired_difference([1.10, 1.21, 1.32], [1.0, 1.1, 1.2])
    assert worse.mean == pytest.approx(0.11) and worse.se == pytest.approx(0.01 / math.sqrt(3))
    assert worse.verdict == "worse"
    better = paired_difference([1.0, 1.1, 1.2], [1.10, 1.21, 1.32])
    assert better.mean == pytest.approx(-0.11) and better.verdict == "better"
    same = paired_difference([1.0, 1.1, 1.2], [1.0, 1.1, 1.2])
    assert same.mean == 0 and same.se == 0 and same.verdict == "indistinguishable"


def test_one_pair_has_no_spread_and_mismatched_pairs_are_refused():
    one = paired_difference([1.5], [1.0])
    assert one.mean == 0.5 and math.isnan(one.se) and one.verdict == "n/a"
    with pytest.raises(ValueError, match="same length"):
        paired_difference([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="empty"):
        paired_difference([], [])


def test_sample_std_uses_n_minus_one():
    assert sample_std([1.0, 2.0, 3.0, 4.0]) == pytest.approx(math.sqrt(5 / 3))
    assert math.isnan(sample_std([1.0]))


def test_checkpoints_record_the_options_and_older_ones_without_them_still_load():
    data = ByteDataset.from_bytes(bytes(range(256)) * 20)
    cfg = TrainConfig(recipe="bf16", **TINY)
    state = Trainer(cfg, dataset=data).state_dict()
    old = {**state, "config": {k: v for k, v in state["config"].items() if k != "recipe_options"}}
    Trainer(cfg, dataset=data).load_state_dict(old)  # made before the field existed: no options
    other = TrainConfig(recipe="bf16", recipe_options={"margin": 1}, **TINY)
    with pytest.raises(ValueError, match="recipe_options"):
        Trainer(other, dataset=data).load_state_dict(state)
