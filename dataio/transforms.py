"""Transform op factories (``dataio.transforms``): geometry, normalization, output layout.

Each function returns a plan node; nothing is computed here. A slot chain fuses its
geometric ops into one resampling step of the source image (see :mod:`dataio.udfs.image`).
The functions are generated from the ops' declarations in :mod:`dataio.plan.registry`
(signature, docstring and validation), which also give the slot methods and the methods
of chain expressions.
"""

from __future__ import annotations

from dataio.plan import registry as _registry

# constants and types of the namespace, importable from here as before the registry
from dataio.plan.registry.array import CAST_DTYPES as CAST_DTYPES
from dataio.plan.registry.array import CastDType as CastDType
from dataio.plan.registry.image import DTYPES as DTYPES
from dataio.plan.registry.image import LAYOUTS as LAYOUTS
from dataio.plan.registry.image import NORMALIZE_PRESETS as NORMALIZE_PRESETS
from dataio.plan.registry.image import Layout as Layout
from dataio.plan.registry.image import OutputDType as OutputDType

__all__ = [
    "center_crop",
    "color_jitter",
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
    "standardize",
    "to_dtype",
]

resize = _registry.factory(_registry.resize)
resize_short = _registry.factory(_registry.resize_short)
center_crop = _registry.factory(_registry.center_crop)
random_crop = _registry.factory(_registry.random_crop)
random_resized_crop = _registry.factory(_registry.random_resized_crop)
random_flip = _registry.factory(_registry.random_flip)
normalize = _registry.factory(_registry.normalize)
output = _registry.factory(_registry.output)
pad = _registry.factory(_registry.pad)
rotate90 = _registry.factory(_registry.rotate90)
grayscale = _registry.factory(_registry.grayscale)
color_jitter = _registry.factory(_registry.color_jitter)
to_dtype = _registry.factory(_registry.to_dtype)
standardize = _registry.factory(_registry.standardize)
fix_length = _registry.factory(_registry.fix_length)
gain = _registry.factory(_registry.gain)
