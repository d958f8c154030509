"""The op registry: every slot op declared once, every surface generated from it.

An op is one :class:`OpSpec`: its name and kind, a typed parameter function (the
signature, defaults, validation and docstring users see), the decoders it applies to,
whether it is random, the ``dataio.udfs`` kernel that computes it and the rule for the
dtype and shape it yields. From the specs come

* the factories of :mod:`dataio.decoders` and :mod:`dataio.transforms` (:func:`factory`),
* the ``Slot`` / ``Chain`` methods and the methods of chain expressions
  (:func:`chain_method`), and the expression namespaces ``col(...).image`` /
  ``.audio`` / ``.tensor`` / ``.bin`` that start chains with a decoder
  (:func:`decoder_method`),
* the engine's lowering tables (``dataio.engine.lower.DECODERS`` / ``ARRAY_OPS``), and
  static output types (:func:`chain_type`) for fixed-shape tensor columns.

Declarations live in :mod:`~dataio.plan.registry.decode`, :mod:`~dataio.plan.registry.image` and
:mod:`~dataio.plan.registry.array`. The registry imports no kernel and no engine module.
"""

from __future__ import annotations

from dataio.plan.registry._spec import (
    OpSpec,
    Params,
    ValueType,
    chain_method,
    declare,
    decoder_method,
    factory,
    spec,
    specs,
)
from dataio.plan.registry.array import fix_length, gain, standardize, to_dtype
from dataio.plan.registry.chain import (
    When,
    chain_type,
    check_branch_ops,
    check_when,
    validate_chain,
    with_otherwise,
)
from dataio.plan.registry.decode import (
    decode_audio,
    decode_bytes,
    decode_image,
    decode_json,
    decode_numpy,
    decode_pt,
    decode_safetensors,
    decode_text,
)
from dataio.plan.registry.image import (
    center_crop,
    color_jitter,
    grayscale,
    normalize,
    output,
    pad,
    random_crop,
    random_flip,
    random_resized_crop,
    resize,
    resize_short,
    rotate90,
)

__all__ = [
    "OpSpec",
    "Params",
    "ValueType",
    "When",
    "center_crop",
    "chain_method",
    "chain_type",
    "check_branch_ops",
    "check_when",
    "color_jitter",
    "declare",
    "decode_audio",
    "decode_bytes",
    "decode_image",
    "decode_json",
    "decode_numpy",
    "decode_pt",
    "decode_safetensors",
    "decode_text",
    "decoder_method",
    "factory",
    "fix_length",
    "gain",
    "grayscale",
    "normalize",
    "output",
    "pad",
    "random_crop",
    "random_flip",
    "random_resized_crop",
    "resize",
    "resize_short",
    "rotate90",
    "spec",
    "specs",
    "standardize",
    "to_dtype",
    "validate_chain",
    "with_otherwise",
]
