"""``DataLoader``: a pipeline and its records as one re-iterable, resumable batch iterator."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

from dataio.plan.pipeline import Pipeline

if TYPE_CHECKING:
    from dataio.loader import Loader

__all__ = ["DataLoader"]


class DataLoader:
    """A synchronous batch iterator: ``for batch in loader`` is one epoch, in record order.

    It binds ``records`` to ``pipeline`` and runs it with the given options (those of
    :meth:`~dataio.plan.pipeline.BoundPipeline.run`), so it behaves like a torch
    ``DataLoader`` in a training loop: every ``iter()`` starts a pass, ``len()`` is the
    batch count of a pass, and :meth:`state_dict` / :meth:`load_state_dict` resume
    mid-epoch. The engine still decodes ahead on its worker pool; the iterator itself
    hands batches over in order on the calling thread. Options are checked here
    (``device`` included), but no record is read before the first ``iter()``.

    Example:
        >>> loader = dataio.DataLoader(pipe, records, output="torch", seed=0)  # doctest: +SKIP
        >>> for epoch in range(3):  # doctest: +SKIP
        ...     for batch in loader:
        ...         train_step(batch["image"], batch["label"])
    """

    def __init__(
        self,
        pipeline: Pipeline,
        records: Any,
        *,
        output: Literal["numpy", "torch", "arrow"] = "numpy",
        concurrency: int | Literal["auto"] = "auto",
        on_failure: Literal["strict", "skip"] | int = "strict",
        log_errors: bool | Callable[[Exception], Any] = False,
        seed: int = 0,
        epoch: int = 0,
        shard: dict[str, Any] | None = None,
        max_prefetch_bytes: int | None = None,
        device: str | None = None,
        progress: bool | Literal["auto"] | None = None,
    ) -> None:
        from dataio.exceptions import PlanError

        if not isinstance(pipeline, Pipeline):
            raise PlanError(
                f"DataLoader needs a dataio.pipeline(...) first, got {type(pipeline).__name__}"
            )
        self.pipeline = pipeline
        self.loader: Loader = pipeline.bind(records).run(
            output,
            concurrency=concurrency,
            order="submit",
            on_failure=on_failure,
            log_errors=log_errors,
            seed=seed,
            epoch=epoch,
            shard=shard,
            max_prefetch_bytes=max_prefetch_bytes,
            device=device,
            progress=progress,
        )

    def __iter__(self) -> Iterator[Any]:
        return iter(self.loader)

    def __len__(self) -> int:
        """Batches in one pass, when the source length is known."""
        return len(self.loader)

    @property
    def epoch(self) -> int:
        """The epoch the next (or current) pass runs as."""
        return self.loader.epoch

    def set_epoch(self, epoch: int) -> None:
        """Run the next pass as ``epoch`` (seeds shuffles and random ops)."""
        self.loader.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """The position to resume from; see :meth:`dataio.loader.Loader.state_dict`."""
        return self.loader.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict`: the next pass continues at that sample."""
        self.loader.load_state_dict(state)

    def close(self) -> None:
        """Stop loading and release buffers; the loader cannot iterate afterwards."""
        self.loader.close()

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DataLoader(output={self.loader.output!r}, epoch={self.epoch})"
