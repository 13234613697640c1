"""Comparing recipes across seeds: recipe specs with overrides, and paired statistics over seeds.

A recipe spec is a registry name optionally followed by field overrides,
``"fp8_block:accumulate=hopper_fp8,promote_interval=0"`` or ``"nvfp4:hp_tail=0.25"``; `parse_recipe_spec`
turns it into (name, options) for `TrainConfig(recipe=..., recipe_options=...)`.

Two recipes trained from the same seed share the initial weights, the batches and the validation batches,
so their loss difference d_s is a paired observation; the spread of d over seeds is much smaller than the
spread of either loss. `tenfold.stats.paired_difference` gives the mean of d, its standard error and a
Student-t 95 % interval (the right interval for a handful of seeds: with 3 seeds t_0.975 = 4.30, not 2).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

Option = tuple[str, bool | int | float | str]


def parse_value(text: str) -> bool | int | float | str:
    """An override's value: true/false as bool, then int, then float, else the text itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


def parse_recipe_spec(spec: str) -> tuple[str, tuple[Option, ...]]:
    """``"name"`` or ``"name:field=value,field=value"`` -> (name, ((field, value), ...)) sorted by field.

    Checks the syntax only; `TrainConfig` (or `recipe(name, **dict(options))`) checks names and fields."""
    name, sep, rest = spec.strip().partition(":")
    if not name:
        raise ValueError(f"recipe spec {spec!r} has no recipe name (form: name[:field=value,...])")
    options: dict[str, bool | int | float | str] = {}
    if sep:
        for item in rest.split(","):
            key, eq, value = item.partition("=")
            key = key.strip()
            if not eq or not key or not value.strip():
                raise ValueError(
                    f"recipe spec {spec!r}: option {item!r} is not field=value (form: name[:field=value,...])"
                )
            if key in options:
                raise ValueError(f"recipe spec {spec!r}: option {key!r} is given twice")
            options[key] = parse_value(value)
        if not options:
            raise ValueError(f"recipe spec {spec!r}: no options after ':'")
    return name, tuple(sorted(options.items()))


def format_recipe_spec(name: str, options: Sequence[Option] = ()) -> str:
    """The canonical spec text (options sorted by field): the inverse of `parse_recipe_spec`."""
    if not options:
        return name
    return name + ":" + ",".join(f"{k}={v}" for k, v in sorted(options))


def split_specs(text: str) -> list[str]:
    """A --recipes list -> specs: ``"bf16,nvfp4:hp_tail=0.25,seed=1,mxfp8"`` -> ``["bf16",
    "nvfp4:hp_tail=0.25,seed=1", "mxfp8"]``.

    Items are separated by ',' (or ';' or spaces); an item holding '=' (never part of a recipe name) is one
    more option of the spec before it."""
    specs: list[str] = []
    for item in re.split(r"[,;\s]+", text):
        if not item:
            continue
        if "=" in item and ":" not in item:
            if not specs:
                raise ValueError(f"recipe list {text!r} starts with an option {item!r}, not a recipe name")
            specs[-1] += "," + item
        else:
            specs.append(item)
    return specs
