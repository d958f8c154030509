"""A pipeline's slots in Ray Data actor pools: ``map_pipeline``."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from dataio.exceptions import PlanError

if TYPE_CHECKING:
    from dataio.plan.pipeline import Pipeline

__all__ = ["BATCH_BYTES", "batch_rows", "map_pipeline"]

#: what a Ray batch's output should weigh at most when ``batch_size`` is not given. Ray
#: spends ~10 ms per batch here (task dispatch, the object-store put and get) plus ~0.4 ms
#: per 600 KB image; ImageNet-sized float32 rows in batches of 16 ran at 0.4x the local
#: loader, in batches of 64 at 0.8x (benchmarks/ray.py). Not more than 32 MiB: glibc
#: serves larger buffers by a fresh mmap each time (its largest mmap threshold), and an
#: actor's output buffer of 64 such rows (38.5 MB) page-faulted 0.23-0.32 ms of system
#: time per image, of 55 rows (31.6 MiB) none. It also keeps blocks well under an
#: object store of a few hundred MiB.
BATCH_BYTES = 32 << 20
#: the bytes a row of a slot whose shape the data decides is taken to weigh
UNKNOWN_ROW_BYTES = 1 << 20
#: field metadata of a ``uint8`` image column whose normalize :func:`train_feed` applies
#: (``normalize="feed"``): the step's scale, bias, layout and dtype as JSON
NORMALIZE_KEY = b"dataio.normalize"


class _PipelineActor:
    """One actor of the pool: its own dataio CPU pool, sized from the actor's CPUs."""

    def __init__(
        self,
        pipe: Pipeline,
        seed: int,
        epoch: int,
        positions: str,
        on_failure: Any,
        log_errors: Any,
        errors: str,
        workers: int,
        deferred: tuple[Any, ...] = (),
    ) -> None:
        # read by dataio's pool when it starts (the first batch): one pool per actor
        os.environ["DATAIO_CPU_WORKERS"] = str(workers)
        self.pipe = pipe
        self.options = {
            "positions": positions,
            "seed": seed,
            "epoch": epoch,
            "on_failure": on_failure,
            "log_errors": log_errors,
            "errors": errors,
        }
        self.deferred = deferred

    def __call__(self, table: Any) -> Any:
        out = self.pipe.apply_arrow(table, **self.options).table
        return _mark_deferred(out, self.deferred) if self.deferred else out


def _mark_deferred(table: Any, steps: tuple[Any, ...]) -> Any:
    """``table`` with each deferred slot's field saying how to normalize it (no copy)."""
    import pyarrow as pa

    by_slot = {step.slot: step for step in steps}
    fields = []
    for field in table.schema:
        step = by_slot.get(field.name)
        if step is not None:
            note = json.dumps(dataclasses.asdict(step)).encode()
            field = field.with_metadata({NORMALIZE_KEY: note})
        fields.append(field)
    return pa.Table.from_arrays(table.columns, schema=pa.schema(fields, table.schema.metadata))


def batch_rows(pipe: Pipeline, *, target: int = BATCH_BYTES) -> int:
    """Rows per Ray batch so that a batch's slot outputs weigh about ``target`` bytes
    (1 to 1,024 rows), from the slots' static output shapes and dtypes.

    Example:
        >>> chain = dataio.slot("image").decode_image().resize(256).center_crop(224)
        >>> dataio.ray.batch_rows(dataio.pipeline(chain.normalize("imagenet"), dataio.batch(64)))
        55
    """
    import numpy as np

    from dataio.plan.registry import chain_type

    row = 0
    for slot in pipe.slots:
        if not slot.ops:
            row += 8  # a passthrough: a number, a key, a path
            continue
        value = chain_type(slot.ops)
        shape, dtype = value.static_shape, value.dtype
        if shape is None or dtype is None or value.objects:
            row += UNKNOWN_ROW_BYTES
            continue
        size = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
        row += math.prod(shape) * size
    return max(1, min(1024, target // max(row, 1)))


def map_pipeline(
    ds: Any,
    pipe: Pipeline,
    *,
    seed: int = 0,
    epoch: int = 0,
    actors: int = 1,
    cpus_per_actor: float = 0.5,
    batch_size: int | None = None,
    positions: str = "__position__",
    on_failure: Literal["strict", "skip"] | int = "strict",
    log_errors: bool | Callable[[Exception], Any] = False,
    errors: Literal["table", "column"] = "table",
    normalize: Literal["actors", "feed"] = "actors",
) -> Any:
    """Run ``pipe``'s record maps and slots over a Ray dataset in an actor pool.

    Each Ray batch goes through :meth:`~dataio.Pipeline.apply_arrow` with the rows'
    ``positions`` column (``__position__``, as :func:`from_frame` and :func:`from_table`
    add), so values, random ops included, equal a local loader's over the same records
    at ``(seed, epoch)``. The dataset keeps its order (``preserve_order``); tensor slots
    come out as ``fixed_shape_tensor`` columns, with ``__index__`` (the positions) and
    ``__key__`` when rows have keys. Each actor runs one dataio CPU pool of
    ``max(1, floor(cpus_per_actor))`` threads.

    Args:
        ds: a ``ray.data.Dataset`` with a ``positions`` column.
        pipe: the pipeline; its shape stage is not applied (batching belongs to the
            consumer: :func:`train_feed`), batch transforms and maps are refused.
        seed: as ``run(seed=...)``.
        epoch: as ``run(epoch=...)``: one dataset per epoch.
        actors: actors in the pool.
        cpus_per_actor: Ray CPUs each actor holds; fractions leave CPUs to read tasks.
        batch_size: rows per Ray batch; ``None``: :func:`batch_rows`, about 32 MiB of
            output per batch (Ray's per-batch cost, ~10 ms, is then small per row; a
            Parquet row group of 8,192 images as one batch would not fit the object
            store).
        positions: the column of each row's stream position.
        on_failure: per Ray batch: ``"strict"`` fails the job on a bad row, ``"skip"``
            drops bad rows (an integer requires that many survivors per batch).
        log_errors: as ``run(log_errors=...)``, in the actors (the ``dataio.rows``
            logger goes to the actors' logs).
        errors: ``"table"`` drops failed rows; ``"column"`` keeps them in order with
            null slot values and an ``__error__`` column saying why (null for good
            rows): the dataset's rejects are the rows where it is set.

    Example:
        >>> out = dataio.ray.map_pipeline(frame.to_ray(), pipe, seed=0, actors=2)  # doctest: +SKIP
    """
    from dataio.plan.pipeline import Pipeline
    from dataio.ray.datasets import _ray

    ray = _ray()
    if not isinstance(pipe, Pipeline):
        raise PlanError(f"map_pipeline takes a dataio.pipeline(...), got {type(pipe).__name__}")
    if pipe.batch_ops or pipe.batch_maps:
        raise PlanError(
            "map_pipeline runs record maps and slots only; batch transforms and batch maps "
            "depend on a loader's batch boundaries: apply them to the batches you train on"
        )
    if isinstance(actors, bool) or not isinstance(actors, int) or actors < 1:
        raise PlanError(f"actors must be a positive integer, got {actors!r}")
    if not isinstance(cpus_per_actor, int | float) or cpus_per_actor <= 0:
        raise PlanError(f"cpus_per_actor must be > 0, got {cpus_per_actor!r}")
    for name, value in (("seed", seed), ("epoch", epoch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise PlanError(f"{name} must be a non-negative integer, got {value!r}")
    if on_failure not in ("strict", "skip") and (
        isinstance(on_failure, bool) or not isinstance(on_failure, int) or on_failure < 0
    ):
        raise PlanError(
            f"on_failure must be 'strict', 'skip' or a survivor count >= 0, got {on_failure!r}"
        )
    if errors not in ("table", "column"):
        raise PlanError(f"errors must be 'table' or 'column', got {errors!r}")
    if normalize not in ("actors", "feed"):
        raise PlanError(f"normalize must be 'actors' or 'feed', got {normalize!r}")
    deferred: tuple[Any, ...] = ()
    if normalize == "feed":
        from dataio.plan import runtime

        pipe, deferred = runtime.engine().split_normalize(pipe)
    names = ds.schema().names if ds.schema() is not None else []
    if positions not in names:
        raise PlanError(
            f"map_pipeline: the dataset has no positions column {positions!r} (columns: "
            f"{names}); make it with frame.to_ray() or dataio.ray.from_table(...)"
        )
    workers = max(1, math.floor(cpus_per_actor))
    if batch_size is None:
        batch_size = batch_rows(pipe)
    elif isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise PlanError(f"batch_size must be a positive integer or None, got {batch_size!r}")
    out = ds.map_batches(
        _PipelineActor,
        fn_constructor_args=(
            pipe,
            seed,
            epoch,
            positions,
            on_failure,
            log_errors,
            errors,
            workers,
            deferred,
        ),
        batch_size=batch_size,
        batch_format="pyarrow",
        zero_copy_batch=True,
        compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=cpus_per_actor,
    )
    out.context.execution_options.preserve_order = True
    return out
