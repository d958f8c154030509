from collections.abc import Sequence
from typing import Any

def resample_into(
    src: Any,
    src_h: int,
    src_w: int,
    channels: int,
    box: tuple[float, float, float, float],
    out: Any,
    out_h: int,
    out_w: int,
    chw: bool,
    out_float: bool,
    scale: Sequence[float] | None,
    bias: Sequence[float] | None,
    hflip: bool,
    vflip: bool,
) -> None: ...
def set_simd(enabled: bool) -> str: ...
def simd() -> str: ...
