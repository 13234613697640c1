"""The recipe registry: names, what each recipe quantizes how, validation."""

from __future__ import annotations

import dataclasses

import pytest

from tenfold.engine import RECIPE_NAMES, GemmQuant, Recipe, recipe, register
from tenfold.formats import scheme

ISSUE_NAMES = (
    "bf16",
    "fp8_delayed",
    "fp8_current",
    "fp8_rowwise",
    "fp8_block",
    "mxfp8",
    "mxfp8_floor",
    "nvfp4",
    "nvfp4_no_rht",
    "nvfp4_no_sr",
    "nvfp4_no_2d",
    "nvfp4_no_hp_layers",
    "mxfp4",
)


def test_every_recipe_of_the_issue_is_registered():
    assert set(ISSUE_NAMES) <= set(RECIPE_NAMES)
    for name in RECIPE_NAMES:
        r = recipe(name)
        assert r.name == name and r.description
        with pytest.raises(dataclasses.FrozenInstanceError):
            r.hp_tail = 0.5  # type: ignore[misc]


def names(r: Recipe) -> dict[str, tuple[str | None, str | None]]:
    def n(s):
        return None if s is None else s.name

    return {g: (n(r.operand(g, "a")), n(r.operand(g, "b"))) for g in ("fprop", "dgrad", "wgrad")}


def test_fp8_recipes():
    d = recipe("fp8_delayed")
    assert names(d) == {
        "fprop": ("fp8_e4m3_tensor", "fp8_e4m3_tensor"),
        "dgrad": ("fp8_e5m2_tensor", "fp8_e4m3_tensor"),
        "wgrad": ("fp8_e5m2_tensor", "fp8_e4m3_tensor"),
    }
    assert d.delayed_tensors() == ("x", "w", "dy") and d.amax_history_len == 1024 and d.amax_algo == "max"
    assert recipe("fp8_current").delayed_tensors() == ()
    assert set(names(recipe("fp8_rowwise"))["wgrad"]) == {"fp8_e4m3_row"}
    assert names(recipe("fp8_block")) == {
        "fprop": ("fp8_e4m3_block1x128", "fp8_e4m3_block128x128"),
        "dgrad": ("fp8_e4m3_block1x128", "fp8_e4m3_block128x128"),
        "wgrad": ("fp8_e4m3_block1x128", "fp8_e4m3_block1x128"),
    }


def test_mx_recipes_use_e4m3_everywhere_with_their_scale_rule():
    for name, mode in (("mxfp8", "rceil"), ("mxfp8_floor", "floor")):
        for s in recipe(name).all_schemes():
            assert s.name == "mxfp8_e4m3" and s.scale_mode == mode
    for s in recipe("mxfp4").all_schemes():
        assert s.name == "mxfp4" and s.rounding == "nearest" and not s.hadamard


def test_nvfp4_recipe_matches_the_nvidia_recipe():
    r = recipe("nvfp4")
    fa, fb = r.fprop.a, r.fprop.b
    assert fa.name == "nvfp4" and fa.rounding == "nearest" and not fa.hadamard
    assert fb.name == "nvfp4_2d" and fb.rounding == "nearest"
    assert r.dgrad.b == fb and r.dgrad.a.rounding == "stochastic" and not r.dgrad.a.hadamard
    assert r.wgrad.a.hadamard and r.wgrad.b.hadamard  # RHT on the wgrad inputs only
    assert r.wgrad.a.rounding == "stochastic" and r.wgrad.b.rounding == "nearest"
    assert r.hp_tail == 0.125
    assert not any(s.hadamard for s in recipe("nvfp4_no_rht").all_schemes())
    assert not any(s.rounding == "stochastic" for s in recipe("nvfp4_no_sr").all_schemes())
    assert recipe("nvfp4_no_2d").fprop.b.name == "nvfp4"
    assert recipe("nvfp4_no_hp_layers").hp_tail == 0.0
    # each ablation changes exactly its one aspect
    full = recipe("nvfp4")
    assert recipe("nvfp4_no_hp_layers").fprop == full.fprop
    assert recipe("nvfp4_no_rht").hp_tail == full.hp_tail


def test_overrides_and_errors():
    assert recipe("nvfp4", hp_tail=0.5).hp_tail == 0.5
    with pytest.raises(ValueError, match="unknown recipe 'nope'"):
        recipe("nope")
    with pytest.raises(ValueError, match="unknown recipe field"):
        recipe("mxfp8", tail=1)
    with pytest.raises(ValueError, match="hp_tail"):
        recipe("nvfp4", hp_tail=2.0)
    with pytest.raises(ValueError, match="amax_algo"):
        recipe("fp8_delayed", amax_algo="mean")


def test_gemm_validation():
    rht = scheme("nvfp4", hadamard=True)
    with pytest.raises(ValueError, match="rotate both operands"):
        GemmQuant(a=rht, b=scheme("nvfp4"))
    with pytest.raises(ValueError, match="same Hadamard sign vector"):
        GemmQuant(a=rht, b=scheme("nvfp4", hadamard=True, hadamard_signs=(1,) * 16))
    with pytest.raises(ValueError, match="axis"):
        GemmQuant(a=scheme("mxfp8_e4m3", axis=0))
    delayed = scheme("fp8_e4m3_tensor", scaling="delayed")
    with pytest.raises(ValueError, match="tensor x uses delayed scaling"):
        Recipe(name="mixed", fprop=GemmQuant(a=delayed), wgrad=GemmQuant(b=scheme("fp8_e4m3_tensor")))


def test_register_rejects_duplicates():
    with pytest.raises(ValueError, match="already registered"):
        register("mxfp8")(lambda: recipe("mxfp8"))
