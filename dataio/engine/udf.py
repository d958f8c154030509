"""Slot chains as DataFusion scalar functions: one fused kernel call per record batch.

A chain is what a slot holds (a decoder op, then transforms, normalize/output). It is
lowered once by :mod:`dataio.engine.lower` into the same fused kernel a pipeline runs;
the scalar function then runs that kernel over each record batch DataFusion hands it:

* values are read zero-copy from the ``binary_view`` buffers DataFusion passes
  (``binary`` and ``large_binary`` columns are coerced to views, which keep the data
  buffers); a string column holds paths (any URI of :mod:`dataio.io`), read with
  :func:`dataio.io.read_bytes`;
* the rows are spread over dataio's CPU pool (:func:`dataio.engine.pool.cpu_pool`) in
  contiguous runs, each kernel call writing into one preallocated output buffer;
* a chain with a static per-row shape returns ``pa.fixed_shape_tensor(dtype, shape)``
  (DataFusion keeps the extension type on the field); any other chain returns the
  variable-shape struct ``{data: large_list<dtype>, shape: list<int32>}`` (the layout of
  Arrow's canonical ``arrow.variable_shape_tensor``, with a 64-bit list so one batch of
  large images cannot overflow its offsets);
* null values give null rows; a value that fails raises the kernel's error class
  (``DecodeError``, ``LimitError``, ...) naming the row of the batch and its path or
  size: SQL has no ``on_failure``, so the query fails (filter bad rows out first);
* a chain with random ops needs a seed (``ChainExpr.seed(s)``) and each row's position
  (DataFusion may split and reorder batches, so a batch's row offsets are no positions):
  row ``i`` draws from :func:`~dataio.engine.executor.record_rng` ``(seed, 0, i, 0)``,
  the generator a single-slot pipeline uses for record ``i`` at epoch 0, so the values
  equal the slot path's. Frames pass the row's position in the frame's order (see
  :mod:`dataio.engine.compile`); SQL functions take it as a second argument. Unseeded
  random chains are refused with a :class:`~dataio.exceptions.PlanError`.

The parts: :mod:`~dataio.engine.udf_kernel` (lowering), :mod:`~dataio.engine.udf_values`
(reading values), :mod:`~dataio.engine.udf_run` (running rows on the pool),
:mod:`~dataio.engine.udf_positions` (seeded positions), :mod:`~dataio.engine.udf_output`
(output columns), :mod:`~dataio.engine.udf_errors` (row errors) and
:mod:`~dataio.engine.udf_image` (the image SQL functions).
"""

from __future__ import annotations

from typing import Any

from dataio.engine.udf_kernel import chain_kernel
from dataio.engine.udf_run import run_batch
from dataio.plan.ops import Op

__all__ = ["chain_udf", "compile_chain"]

_PATH_TYPES = ("Utf8", "LargeUtf8", "Utf8View")


def chain_udf(ops: tuple[Op, ...], name: str, seed: int | None = None) -> Any:
    """A DataFusion scalar function ``name(bytes)`` running the chain (for SQL).

    ``bytes`` may be any binary column; for columns of paths, use the frame expression.
    With a ``seed`` the function is ``name(bytes, position)``: ``position`` (an integer
    per row) seeds the row's random ops as a pipeline seeds that record.
    """
    import pyarrow as pa
    from datafusion import udf

    chain = chain_kernel(ops, seeded=seed is not None)
    field = pa.field(name, chain.arrow_type)
    if seed is None:

        def call(values: Any) -> Any:
            return run_batch(chain, values)

        return udf(call, [pa.field("value", pa.binary_view())], field, "immutable", name)

    def seeded(values: Any, positions: Any) -> Any:
        return run_batch(chain, values, seed=seed, positions=positions)

    inputs = [pa.field("value", pa.binary_view()), pa.field("position", pa.int64())]
    return udf(seeded, inputs, field, "immutable", name)


def _frame_udf(ops: tuple[Op, ...], seed: int | None) -> Any:
    """The chain as a function of the values (as views), their type's name and, for a
    seeded chain, each row's position."""
    import pyarrow as pa
    from datafusion import udf

    chain = chain_kernel(ops, seeded=seed is not None)

    def kind(types: Any) -> Any:
        # the type's name through NumPy: no Python scalar per batch (as_py)
        return types.slice(0, 1).to_numpy(zero_copy_only=False)[0] if len(types) else None

    def call(values: Any, types: Any) -> Any:
        return run_batch(chain, values, paths=kind(types) in _PATH_TYPES)

    def seeded(values: Any, types: Any, positions: Any) -> Any:
        paths = kind(types) in _PATH_TYPES
        return run_batch(chain, values, paths=paths, seed=seed, positions=positions)

    inputs = [pa.field("value", pa.binary_view()), pa.field("type", pa.string())]
    field = pa.field("chain", chain.arrow_type)
    if seed is None:
        return udf(call, inputs, field, "immutable", "dataio_chain")
    inputs.append(pa.field("position", pa.int64()))
    return udf(seeded, inputs, field, "immutable", "dataio_chain")


def compile_chain(
    ops: tuple[Op, ...], value: Any, *, seed: int | None = None, position: Any = None
) -> Any:
    """A DataFusion expression running the chain over the compiled expression ``value``.

    Binary columns are read as bytes, string columns as paths; the kernel runs once per
    record batch when the frame runs. A seeded chain also reads ``position``, the
    compiled expression giving each row's position.
    """
    import pyarrow as pa
    from datafusion import functions as f

    function = _frame_udf(ops, seed)
    args = [value.cast(pa.binary_view()), f.arrow_typeof(value)]
    if seed is not None:
        args.append(position.cast(pa.int64()))
    return function(*args)
