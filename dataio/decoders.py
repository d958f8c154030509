"""Decoder op factories (``dataio.decoders``): bytes in a record field to arrays.

These build plan nodes only; the kernels live in :mod:`dataio.udfs`. Each function is
generated from the op's declaration in :mod:`dataio.plan.registry.decode` (signature,
docstring and validation); the slot methods (``slot("x").decode_image(...)``) and the
expression namespaces (``col("x").image.decode(...)``) build the same ops.
"""

from __future__ import annotations

from dataio.plan import registry as _registry
from dataio.plan.registry.decode import IMAGE_MODES as IMAGE_MODES
from dataio.plan.registry.decode import ImageMode as ImageMode

__all__ = ["IMAGE_MODES", "audio", "bytes", "image", "json", "numpy", "pt", "safetensors", "text"]

image = _registry.factory(_registry.decode_image)
numpy = _registry.factory(_registry.decode_numpy)
safetensors = _registry.factory(_registry.decode_safetensors)
audio = _registry.factory(_registry.decode_audio)
json = _registry.factory(_registry.decode_json)
text = _registry.factory(_registry.decode_text)
bytes = _registry.factory(_registry.decode_bytes)
pt = _registry.factory(_registry.decode_pt)
