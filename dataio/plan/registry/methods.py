"""The transform methods slots and chain expressions share, one line per registry op."""

from __future__ import annotations

from dataio.plan import registry

__all__ = ["TransformMethods"]


class TransformMethods:
    """Methods appending each registry transform to a chain; the class defines ``then``."""

    resize = registry.chain_method(registry.resize)
    resize_short = registry.chain_method(registry.resize_short)
    center_crop = registry.chain_method(registry.center_crop)
    random_crop = registry.chain_method(registry.random_crop)
    random_resized_crop = registry.chain_method(registry.random_resized_crop)
    random_flip = registry.chain_method(registry.random_flip)
    normalize = registry.chain_method(registry.normalize)
    output = registry.chain_method(registry.output)
    pad = registry.chain_method(registry.pad)
    rotate90 = registry.chain_method(registry.rotate90)
    grayscale = registry.chain_method(registry.grayscale)
    color_jitter = registry.chain_method(registry.color_jitter)
    to_dtype = registry.chain_method(registry.to_dtype)
    standardize = registry.chain_method(registry.standardize)
    fix_length = registry.chain_method(registry.fix_length)
    gain = registry.chain_method(registry.gain)
