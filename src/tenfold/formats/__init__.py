"""Block-scaled number formats of Blackwell's second-generation Transformer Engine and Hopper's FP8 recipes,
emulated bit-exactly in PyTorch on any CPU or GPU.

    >>> import torch
    >>> from tenfold.formats import scheme, quantize, fake_quantize
    >>> x = torch.randn(64, 64)
    >>> q = quantize(x, scheme("nvfp4"))
    >>> torch.equal(q.dequantize(), fake_quantize(x, scheme("nvfp4")))
    True
"""

from tenfold.formats.e8m0 import NonFinite, ScaleMode, decode_e8m0, encode_e8m0, reciprocal_e8m0
from tenfold.formats.elements import E2M1, E2M3, E3M2, E4M3, E5M2, ELEMENT_FORMATS, INT8, ElementFormat
from tenfold.formats.fake import fake_quantize
from tenfold.formats.quantize import quantize
from tenfold.formats.rounding import Rounding, round_to_grid, sr_noise
from tenfold.formats.scheme import SCHEME_NAMES, TE_HADAMARD_SIGNS, Family, Scaling, Scheme, scheme
from tenfold.formats.state import AmaxAlgo, AmaxHistory
from tenfold.formats.tensor import QuantizedTensor

__all__ = [
    "E2M1",
    "E2M3",
    "E3M2",
    "E4M3",
    "E5M2",
    "ELEMENT_FORMATS",
    "INT8",
    "SCHEME_NAMES",
    "TE_HADAMARD_SIGNS",
    "AmaxAlgo",
    "AmaxHistory",
    "ElementFormat",
    "Family",
    "NonFinite",
    "QuantizedTensor",
    "Rounding",
    "ScaleMode",
    "Scaling",
    "Scheme",
    "decode_e8m0",
    "encode_e8m0",
    "fake_quantize",
    "quantize",
    "reciprocal_e8m0",
    "round_to_grid",
    "scheme",
    "sr_noise",
]
