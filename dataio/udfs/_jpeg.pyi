from typing import Any

def decode_region(
    data: Any,
    channels: int,
    denom: int,
    x0: int,
    y0: int,
    x1: int,
    y1: int,
    fast_idct: bool,
    fast_upsample: bool,
) -> tuple[bytearray, int, int, int, int] | None: ...
def version() -> str: ...
