"""PyTorch adapters: a pipeline as a ``torch.utils.data.IterableDataset``.

Importing this module imports torch; ``import dataio`` alone does not.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import torch.utils.data

from dataio.plan.pipeline import Pipeline

__all__ = ["IterableDataset"]


class IterableDataset(torch.utils.data.IterableDataset[Any]):
    """A pipeline over ``records`` as an ``IterableDataset`` of ready batches.

    Give it to ``torch.utils.data.DataLoader(dataset, batch_size=None, ...)``: dataio
    already batches. With ``num_workers=N`` each worker process runs the pipeline on
    its own batches — batch ``b`` goes to worker ``b % N`` — so every sample appears
    exactly once and, since torch's loader takes workers' batches round-robin, in the
    same order and with the same batches as with ``num_workers=0``. Every worker still
    enumerates the source (reading records it skips, without decoding them).

    Each ``iter()`` is one pass of epoch :attr:`epoch`; call :meth:`set_epoch` before
    each epoch to reshuffle (worker processes get a fresh copy of the dataset, so the
    epoch cannot advance by itself; with ``persistent_workers=True`` the workers keep
    the epoch they started with). Resume a training run with :class:`dataio.DataLoader`
    instead: a worker pool's position is not checkpointed.

    Args:
        pipeline: the plan, from :func:`dataio.pipeline`.
        records: what :meth:`~dataio.plan.pipeline.Pipeline.bind` takes.
        **run_options: options of :meth:`~dataio.plan.pipeline.BoundPipeline.run`;
            ``output`` defaults to ``"torch"``.

    Example:
        >>> dataset = dataio.torch.IterableDataset(pipe, records, seed=0)  # doctest: +SKIP
        >>> torch_loader = torch.utils.data.DataLoader(  # doctest: +SKIP
        ...     dataset, batch_size=None, num_workers=2
        ... )
    """

    def __init__(self, pipeline: Pipeline, records: Any, **run_options: Any) -> None:
        super().__init__()
        run_options.setdefault("output", "torch")
        if run_options.get("order", "submit") != "submit":
            from dataio.exceptions import PlanError

            raise PlanError("IterableDataset delivers in record order; drop order=")
        self.pipeline = pipeline
        self.records = records
        self.run_options = run_options
        self.epoch = int(run_options.pop("epoch", 0))
        with self._loader() as loader:  # check the options now, not in a worker
            self._length = _length(loader)

    def set_epoch(self, epoch: int) -> None:
        """Run the next passes as ``epoch`` (seeds shuffles and random ops)."""
        from dataio.exceptions import PlanError

        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise PlanError(f"epoch must be a non-negative integer, got {epoch!r}")
        self.epoch = epoch

    def __len__(self) -> int:
        """Batches in one pass (over all workers), when the source length is known."""
        if self._length is None:
            raise TypeError("this dataset's batch count is not known before reading its records")
        return self._length

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        with self._loader() as loader:
            if info is not None and info.num_workers > 1:
                loader.select_chunks = _every(info.id, info.num_workers)
            yield from loader

    def _loader(self) -> Any:
        options = dict(self.run_options)
        output = options.pop("output")
        return self.pipeline.bind(self.records).run(output, epoch=self.epoch, **options)


def _every(worker: int, workers: int) -> Any:
    def select(chunks: Iterator[Any]) -> Iterator[Any]:
        return itertools.islice(chunks, worker, None, workers)

    return select


def _length(loader: Any) -> int | None:
    try:
        return len(loader)
    except TypeError:
        return None
