"""Turning a finished job into a :class:`~dataio.batch.Batch` under the failure policy."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from dataio.batch import Batch
from dataio.engine.executor import BatchJob
from dataio.exceptions import BatchFailedError, DataioError, ShapeMismatchError

__all__ = ["FailurePolicy", "assemble"]

row_logger = logging.getLogger("dataio.rows")


class FailurePolicy:
    """``on_failure`` and ``log_errors`` of a run, applied to each finished job."""

    def __init__(
        self, on_failure: str | int, log_errors: bool | Callable[[Exception], Any]
    ) -> None:
        self.on_failure = on_failure
        self.log_errors = log_errors

    def report(self, errors: list[DataioError]) -> None:
        """Send row errors to the configured logger or callback."""
        if self.log_errors is True:
            for error in errors:
                row_logger.warning("dropped %s", error)
        elif callable(self.log_errors):
            for error in errors:
                self.log_errors(error)

    def check(self, errors: list[DataioError], survivors: int, total: int) -> None:
        """Raise when the batch does not meet the policy."""
        if not errors:
            return
        if self.on_failure == "strict":
            raise errors[0]
        needed = 1 if self.on_failure == "skip" else int(self.on_failure)
        if survivors < needed:
            raise BatchFailedError(
                f"only {survivors} of {total} rows survived, {needed} required "
                f"(on_failure={self.on_failure!r}); first error: {errors[0]}",
                errors,
            )


def _stack(name: str, arrays: list[np.ndarray]) -> np.ndarray:
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise ShapeMismatchError(
            f"slot {name!r} produced rows of different shapes {sorted(shapes)}; "
            "add a fixed-size op (resize or a crop) or use a batch map to pad"
        )
    return np.stack(arrays)


def _whole(job: BatchJob) -> Batch:
    """Every row survived: hand over the job's buffers and lists as they are."""
    columns: dict[str, Any] = {}
    for kernel in job.kernels:
        if kernel.name in job.buffers:
            columns[kernel.name] = job.buffers[kernel.name]
        else:
            values = job.values[kernel.name]
            columns[kernel.name] = values if kernel.passthrough else _stack(kernel.name, values)
    return Batch(columns, keys=job.keys, indices=job.positions, sizes=job.sizes)  # type: ignore[arg-type]


def assemble(job: BatchJob, policy: FailurePolicy) -> Batch:
    """Apply the failure policy and build the batch; Python map errors re-raise as is."""
    if job.fatal:
        raise min(job.fatal, key=lambda item: item[0])[1]
    errors = [e for e in job.errors if e is not None]
    if not errors:
        return _whole(job)
    policy.report(errors)
    keep = [row for row, e in enumerate(job.errors) if e is None]
    policy.check(errors, len(keep), len(job.records))
    everything = len(keep) == len(job.records)
    columns: dict[str, Any] = {}
    for kernel in job.kernels:
        if kernel.name in job.buffers:
            buffer = job.buffers[kernel.name]
            columns[kernel.name] = buffer if everything else buffer[keep]
        else:
            values = [job.values[kernel.name][row] for row in keep]
            columns[kernel.name] = values if kernel.passthrough else _stack(kernel.name, values)
    sizes = {name: [s[row] for row in keep] for name, s in job.sizes.items()}
    return Batch(
        columns,
        keys=[job.keys[row] for row in keep],
        indices=[job.positions[row] for row in keep],
        errors=errors,
        sizes=sizes,  # type: ignore[arg-type]
    )
