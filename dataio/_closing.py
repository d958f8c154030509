"""A mixin for handles whose context exit is their ``close()``."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Closing:
    """``with handle:`` closes the handle on exit; subclasses define ``close()``."""

    def close(self) -> None:  # pragma: no cover - always overridden
        """Release what the handle holds."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
