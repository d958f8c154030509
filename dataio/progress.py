"""Progress bars: one small interface over tqdm, which stays optional.

Every bar dataio shows (a loader's passes, long collects, large downloads,
:func:`dataio.testing.make_jpegs`) comes from :func:`bar`. ``enabled=None`` (or
``"auto"``) shows a bar only where a person watches: stderr is a terminal, or the code
runs in a Jupyter kernel. Output redirected to a file or a log collector gets nothing,
so bars never end up in logs. ``True`` forces a bar and ``False`` turns it off.

Without tqdm, a bar that would have been shown prints a one-line note (once per
process) and does nothing.

Example:
    >>> with dataio.progress.bar(total=3, desc="work", enabled=False) as b:
    ...     for _ in range(3):
    ...         b.update()
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, Literal, TypeVar

__all__ = ["Bar", "PassBar", "bar", "iterate", "pass_bar", "resolve", "track_bytes"]

Option = bool | Literal["auto"] | None
T = TypeVar("T")

NOTE = (
    "dataio: progress bars need tqdm, which is not installed; "
    "`pip install tqdm` to see them (continuing without)\n"
)
_noted = False  # the note is printed once per process
#: seconds before a bar for usually-quick work (a collect, a download) appears
DELAY = 1.0


def resolve(option: Option = None) -> bool:
    """Resolve a ``progress=`` option: ``True``/``False`` as given; ``None`` or ``"auto"``
    is on only when stderr is a terminal or in a notebook kernel.

    Example:
        >>> dataio.progress.resolve(False)
        False
    """
    if option is None or option == "auto":
        return _interactive()
    if isinstance(option, bool):
        return option
    from dataio.exceptions import PlanError

    raise PlanError(f"progress must be True, False, None or 'auto', got {option!r}")


def _interactive() -> bool:
    stream = sys.stderr
    try:
        if stream is not None and stream.isatty():
            return True
    except (AttributeError, ValueError):  # a closed or odd replacement stream
        pass
    return _in_notebook()


def _in_notebook() -> bool:
    ipython = sys.modules.get("IPython")  # never imported here: only when already loaded
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class Bar:
    """A bar that does nothing: what :func:`bar` returns when progress is off."""

    on = False

    def update(self, n: float = 1) -> None:
        """Advance by ``n`` units."""

    def set_postfix(self, text: str) -> None:
        """Show ``text`` after the counts."""

    def close(self) -> None:
        """Finish the bar (leaves the last line on screen)."""

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Tqdm(Bar):
    on = True

    def __init__(self, impl: Any) -> None:
        self._impl = impl

    def update(self, n: float = 1) -> None:
        self._impl.update(n)

    def set_postfix(self, text: str) -> None:
        self._impl.set_postfix_str(text, refresh=False)

    def close(self) -> None:
        self._impl.close()


def bar(
    *,
    total: float | None = None,
    desc: str | None = None,
    unit: str = "it",
    enabled: Option = None,
    unit_scale: bool = False,
    delay: float = 0.0,
    file: IO[str] | None = None,
) -> Bar:
    """A progress bar, or a no-op :class:`Bar` when progress is off.

    Args:
        total: the units expected (``None``: a counter without a percentage).
        desc: the label in front of the bar.
        unit: what one unit is (``"batch"``, ``"B"``, ``"img"``).
        enabled: ``True``, ``False``, or ``None``/``"auto"`` (see :func:`resolve`).
        unit_scale: show ``k``/``M``/``G`` prefixes (bytes and large counts).
        delay: show nothing until this many seconds passed (for work that is
            usually quick).
        file: where to draw (default: stderr).

    Example:
        >>> with dataio.progress.bar(total=10, desc="items", enabled=False) as b:
        ...     b.update(10)
    """
    if not resolve(enabled):
        return Bar()
    factory = _factory()
    if factory is None:
        return Bar()
    options: dict[str, Any] = {"total": total, "desc": desc, "unit": unit, "delay": delay}
    if unit_scale:
        options.update(unit_scale=True, unit_divisor=1024 if unit == "B" else 1000)
    if file is not None:
        options["file"] = file
    return _Tqdm(factory(**options))


def _factory() -> Callable[..., Any] | None:
    global _noted
    try:
        from tqdm.std import tqdm
    except ImportError:
        if not _noted:
            _noted = True
            sys.stderr.write(NOTE)
        return None
    if _in_notebook():
        try:  # the widget bar, where ipywidgets is there to draw it
            import ipywidgets  # noqa: F401
            from tqdm.notebook import tqdm as notebook_tqdm
        except ImportError:
            return tqdm
        return notebook_tqdm
    return tqdm


def iterate(
    items: Iterable[T],
    *,
    total: float | None = None,
    desc: str | None = None,
    unit: str = "it",
    enabled: Option = None,
    weight: Callable[[T], float] | None = None,
    long: bool = False,
) -> Iterator[T]:
    """Yield ``items`` while a bar counts them (each counts ``weight(item)``, default 1).

    ``long=True`` is for work that is usually quick: its bar appears only after
    :data:`DELAY` seconds.

    Example:
        >>> list(dataio.progress.iterate([1, 2], desc="n", enabled=False))
        [1, 2]
    """
    shown = bar(
        total=total,
        desc=desc,
        unit=unit,
        enabled=enabled,
        delay=DELAY if long else 0.0,
        unit_scale=weight is not None,
    )
    if not shown.on:
        yield from items
        return
    try:
        for item in items:
            shown.update(1 if weight is None else weight(item))
            yield item
    finally:
        shown.close()


def track_bytes(
    sink: Callable[[int, Any], None], total: int, *, desc: str, enabled: Option = None
) -> Callable[[int, Any], None]:
    """Wrap a download's ``sink(position, piece)`` so a byte bar follows it; ``sink``
    itself when progress is off. The bar appears after :data:`DELAY` seconds and closes
    once ``total`` bytes arrived."""
    shown = bar(total=total, desc=desc, unit="B", unit_scale=True, enabled=enabled, delay=DELAY)
    if not shown.on:
        return sink
    arrived = [0]
    lock = threading.Lock()  # ranged parts of one body arrive on several threads

    def counted(at: int, piece: Any) -> None:
        sink(at, piece)
        with lock:
            shown.update(len(piece))
            arrived[0] += len(piece)
            if arrived[0] >= total:
                shown.close()

    return counted


class PassBar:
    """The bar of one loader pass: batches, with samples/s and skipped rows after them."""

    def __init__(self, shown: Bar) -> None:
        self._bar = shown
        self._samples = 0
        self._skipped = 0
        self._started = time.perf_counter()

    def batch(self, rows: int, skipped: int = 0) -> None:
        """Count one delivered batch of ``rows`` records, ``skipped`` of them dropped."""
        self._samples += rows - skipped
        self._skipped += skipped
        rate = self._samples / max(time.perf_counter() - self._started, 1e-9)
        text = f"{rate:,.0f} samples/s"
        if self._skipped:
            text += f", skipped {self._skipped}"
        self._bar.set_postfix(text)
        self._bar.update(1)

    def close(self) -> None:
        """Finish the pass's bar."""
        self._bar.close()


def pass_bar(option: Option, *, total: int | None, epoch: int) -> PassBar | None:
    """The bar of a loader pass over ``epoch`` (``total`` batches when known), or
    ``None`` when progress is off, so the loader pays nothing per batch."""
    shown = bar(total=total, desc=f"epoch {epoch}", unit="batch", enabled=option)
    return PassBar(shown) if shown.on else None
