from typing import Any

def scan(
    buffer: Any, pos: int, offset: int, total: int, max_member: int, /
) -> tuple[list[tuple[str, int, bytes]], int]: ...
