"""One cache of static-shape compiled kernels, shared by the two fused fast paths.

`tenfold.formats.fake_quantize` and the engine's GEMM operands (`tenfold.engine.quant.operand`) both
compile a plain function once per (scheme, shape, dtype, device) with `torch.compile`; this module holds
that cache and the size above which compiling repays itself. The cache holds compiled kernels, not state
that changes results: every compiled function gives the same bits as its eager original.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Hashable

import torch

# tensors with at least this many elements take the compiled path under backend="auto"
COMPILE_MIN_NUMEL = 1 << 16


@functools.lru_cache(maxsize=1024)
def compiled_copy(fn: Callable[..., torch.Tensor], label: str, key: Hashable) -> Callable[..., torch.Tensor]:
    """A static-shape `torch.compile` of a fresh copy of `fn`'s code, one per (fn, label, key).

    `key` is what the kernel is specialised on (scheme, shape, dtype, device, ...); `label` names the
    copy (``<fn name>_<label>``, seen in profiles). Dynamo keeps its cache on the code object, so every key
    gets its own copy of the code: a second scheme or shape then compiles afresh with static shapes
    instead of counting as a recompile of one function (which would switch on dynamic shapes, about 2x
    slower here, and hit the recompile limit). The copy itself is compiled, not a `functools.partial` of
    it: dynamo traces a partial through one shared wrapper frame, whose cache then fills up after 8 keys
    and every later key silently runs eagerly.
    """
    copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, f"{fn.__name__}_{label}")
    return torch.compile(copy, dynamic=False)
