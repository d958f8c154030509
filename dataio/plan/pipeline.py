"""The pipeline DSL: immutable plan values. Building a plan does no work.

A pipeline is ``[record maps] slots... shape-stage [batch maps]``:

* record maps (:func:`map` before the shape stage) see each input record;
* slots (:func:`slot`) each turn one record field into one batch column;
* exactly one shape stage (:func:`batch`) groups the ordered stream;
* batch maps (:func:`map` after the shape stage) see each :class:`~dataio.batch.Batch`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Self

from dataio.exceptions import PlanError
from dataio.plan import registry, runtime
from dataio.plan.naming import callable_name
from dataio.plan.ops import Op, positive_int
from dataio.plan.predicates import Predicate
from dataio.plan.registry.chain import When
from dataio.plan.registry.methods import TransformMethods

if TYPE_CHECKING:
    from dataio.engine.apply import ArrowResult
    from dataio.loader import Loader

__all__ = [
    "BatchStage",
    "BoundPipeline",
    "CollateStage",
    "GroupByStage",
    "Map",
    "Pipeline",
    "Slot",
    "Chain",
    "batch",
    "chain",
    "collate",
    "group_by",
    "map",
    "pipeline",
    "slot",
    "slots",
]

PLAN_VERSION = 1


@dataclass(frozen=True)
class Map:
    """A Python function applied to each record (before the shape stage) or batch (after)."""

    fn: Callable[[Any], Any]

    def describe(self) -> dict[str, Any]:
        """Return a JSON-ready description (the function is named, not hashed)."""
        return {"map": callable_name(self.fn)}


@dataclass(frozen=True)
class BatchStage:
    """Group the ordered record stream into batches of ``size`` rows."""

    size: int
    drop_last: bool = False
    prefetch: int = 2

    def describe(self) -> dict[str, Any]:
        """Return a JSON-ready description."""
        return {"batch": self.size, "drop_last": self.drop_last, "prefetch": self.prefetch}


@dataclass(frozen=True)
class CollateStage:
    """Keep upstream batch boundaries: each source item is a list of records, one batch."""

    prefetch: int = 2

    def describe(self) -> dict[str, Any]:
        """Return a JSON-ready description."""
        return {"collate": True, "prefetch": self.prefetch}


@dataclass(frozen=True)
class GroupByStage:
    """One batch per contiguous run of equal ``key`` values in the record stream."""

    key: str
    prefetch: int = 2

    def describe(self) -> dict[str, Any]:
        """Return a JSON-ready description."""
        return {"group_by": self.key, "prefetch": self.prefetch}


ShapeStage = BatchStage | CollateStage | GroupByStage


@dataclass(frozen=True)
class Slot(TransformMethods):
    """One field of a record turned into one column of every batch.

    A slot is either a chain of ops (a decoder first, then transforms) or a passthrough
    of the Python value. Methods return a new slot; the original is unchanged.
    """

    name: str
    ops: tuple[Op, ...] = ()
    passthrough_values: bool = False
    field_name: str | None = None
    optional: bool = False
    active: Predicate | None = None

    @property
    def source_field(self) -> str:
        """The record field this slot reads (its name unless ``field=`` was given)."""
        return self.field_name or self.name

    def then(self, *ops: Op | Chain) -> Self:
        """Append ops built by :mod:`dataio.decoders` / :mod:`dataio.transforms`.

        Example:
            >>> from dataio import decoders, transforms
            >>> dataio.slot("image").then(decoders.image(), transforms.resize_short(64))
            slot('image').decode_image(mode='rgb').resize_short(size=64)
        """
        if self.passthrough_values:
            raise PlanError(f"slot {self.name!r} is a passthrough; it takes no ops")
        ops = _flatten_ops(self.name, ops)
        chain = self.ops + ops
        registry.validate_chain(f"slot {self.name!r}", chain)
        return replace(self, ops=chain)

    chain = then

    # the op methods, generated from the registry (signature and docs of each factory)
    decode_image = registry.chain_method(registry.decode_image)
    decode_numpy = registry.chain_method(registry.decode_numpy)
    decode_safetensors = registry.chain_method(registry.decode_safetensors)
    decode_audio = registry.chain_method(registry.decode_audio)
    decode_json = registry.chain_method(registry.decode_json)
    decode_text = registry.chain_method(registry.decode_text)
    decode_bytes = registry.chain_method(registry.decode_bytes)
    decode_pt = registry.chain_method(registry.decode_pt)

    def active_when(self, predicate: Predicate) -> Slot:
        """Decode this optional slot only for records where a field ``predicate`` holds.

        Other rows get ``None`` and their bytes are never read or decoded.

        Example:
            >>> from dataio import cond as c
            >>> dataio.slot("mask", optional=True).active_when(c.col("mask_id").is_not_null())
            slot('mask', optional=True).active_when(...)
        """
        if not self.optional:
            raise PlanError(f"slot {self.name!r}: active_when needs slot(..., optional=True)")
        if not isinstance(predicate, Predicate) or predicate.kind != "field":
            raise PlanError(
                f"slot {self.name!r}: active_when takes a field predicate such as "
                "dataio.cond.col('x').is_not_null()"
            )
        return replace(self, active=predicate)

    def when(self, predicate: Predicate) -> When[Self]:
        """Branch on the decoded value's shape: ``.when(p).then(ops).otherwise(ops)``.

        Example:
            >>> from dataio import cond as c, transforms as t
            >>> s = (dataio.slot("image").decode_image()
            ...      .when(c.shape(axis=0).gt(512)).then(t.center_crop(h=512, w=512))
            ...      .otherwise(t.resize(h=512, w=512)))
        """
        where = f"slot {self.name!r}"
        return When(self, registry.check_when(where, self.ops, predicate), where)

    def otherwise(self, *ops: Op) -> Self:
        """The ops of the last ``when`` branch's false side."""
        return replace(self, ops=registry.with_otherwise(f"slot {self.name!r}", self.ops, ops))

    def passthrough(self) -> Slot:
        """Deliver the field's Python values: numbers or bools as an array of their dtype.

        A column of Python ints becomes int64, of floats float64, of bools bool (tensors
        under ``run("torch")``); NumPy scalars keep their dtype. Other values (strings,
        ``None``, mixed kinds) stay a list in row order.

        Example:
            >>> dataio.slot("label").passthrough()
            slot('label').passthrough()
        """
        if self.ops:
            raise PlanError(f"slot {self.name!r} already has ops; a passthrough slot takes none")
        return replace(self, passthrough_values=True)

    def describe(self) -> dict[str, Any]:
        """Return a JSON-ready description."""
        body: dict[str, Any] = {"slot": self.name, "field": self.source_field}
        if self.optional:
            body["optional"] = True
        if self.active is not None:
            body["active_when"] = self.active.describe()
        if self.passthrough_values:
            body["passthrough"] = True
        else:
            body["ops"] = [op.describe() for op in self.ops]
        return body

    def __repr__(self) -> str:
        head = f"slot({self.name!r}, optional=True)" if self.optional else f"slot({self.name!r})"
        if self.active is not None:
            head += ".active_when(...)"
        if self.passthrough_values:
            return head + ".passthrough()"
        return head + "".join(f".{op!r}" for op in self.ops)


class Chain(Slot):
    """A reusable op chain without a field: the slot methods, applied to no slot yet.

    Build it like a slot, then give it to :func:`slots` or ``slot(...).then(chain)``.
    """

    def __repr__(self) -> str:
        if self.passthrough_values:
            return "chain().passthrough()"
        return "chain()" + "".join(f".{op!r}" for op in self.ops)


def _flatten_ops(name: str, ops: Sequence[Any]) -> tuple[Op, ...]:
    flat: list[Op] = []
    for op in ops:
        if isinstance(op, Chain):
            if op.passthrough_values:
                raise PlanError(f"slot {name!r}: a passthrough chain has no ops to apply")
            flat.extend(op.ops)
        elif isinstance(op, Op):
            flat.append(op)
        else:
            raise PlanError(f"slot {name!r}: expected an op or a chain, got {op!r}")
    return tuple(flat)


def chain(*ops: Op | Chain) -> Chain:
    """A reusable chain of ops, built with the slot methods or from ops and chains.

    Example:
        >>> augment = dataio.chain().decode_image().resize_short(64).center_crop(h=56, w=56)
        >>> dataio.slot("image").then(augment)
        slot('image').decode_image(mode='rgb').resize_short(size=64).center_crop(h=56, w=56)
    """
    empty = Chain("chain")
    return empty.then(*ops) if ops else empty


def slots(
    *names: str, chain: Chain | Op | Sequence[Op] = (), optional: bool = False
) -> tuple[Slot, ...]:
    """Several slots sharing one chain (a passthrough chain makes passthrough slots).

    ``dataio.pipeline`` takes the returned tuple as one stage.

    Example:
        >>> left, right = dataio.slots("left", "right", chain=dataio.chain().decode_image())
        >>> right
        slot('right').decode_image(mode='rgb')
    """
    if not names:
        raise PlanError("slots() needs at least one slot name")
    made = []
    for name in names:
        one = slot(name, optional=optional)
        if isinstance(chain, Chain) and chain.passthrough_values:
            made.append(one.passthrough())
        else:
            made.append(one.then(*(chain if isinstance(chain, Sequence) else (chain,))))
    return tuple(made)


def slot(name: str, *, field: str | None = None, optional: bool = False) -> Slot:
    """Start a slot chain for record field ``name`` (or ``field`` when it differs).

    An ``optional`` slot gives ``None`` for records that lack the field, hold ``None``
    in it, or fail its :meth:`Slot.active_when` predicate, instead of an error.

    Example:
        >>> dataio.slot("image").decode_image(mode="rgb").resize_short(256)
        slot('image').decode_image(mode='rgb').resize_short(size=256)
    """
    if not isinstance(name, str) or not name:
        raise PlanError(f"slot name must be a non-empty string, got {name!r}")
    return Slot(name, field_name=field, optional=bool(optional))


def map(fn: Callable[[Any], Any]) -> Map:
    """Wrap a Python function as a record map (before the shape stage) or batch map (after).

    Record maps take a record mapping and return one; batch maps take a
    :class:`~dataio.batch.Batch` and may return anything.

    Example:
        >>> dataio.map(lambda r: {"image": r["path"]})  # doctest: +ELLIPSIS
        Map(fn=<function <lambda> at ...>)
    """
    if not callable(fn):
        raise PlanError(f"map needs a callable, got {fn!r}")
    return Map(fn)


def batch(size: int, *, drop_last: bool = False, prefetch: int = 2) -> BatchStage:
    """Group records into batches of ``size``; ``prefetch`` batches may be in flight.

    Example:
        >>> dataio.batch(64, drop_last=True, prefetch=4)
        BatchStage(size=64, drop_last=True, prefetch=4)
    """
    return BatchStage(
        positive_int(size, "batch size"), bool(drop_last), positive_int(prefetch, "batch prefetch")
    )


def collate(*, prefetch: int = 2) -> CollateStage:
    """Use the source's own batches: every source item is a list of records.

    Example:
        >>> dataio.collate(prefetch=4)
        CollateStage(prefetch=4)
    """
    return CollateStage(positive_int(prefetch, "collate prefetch"))


def group_by(key: str, *, prefetch: int = 2) -> GroupByStage:
    """Emit one batch per contiguous run of records with the same ``key`` field.

    Pair it with :func:`dataio.from_sampler`, which tags records with ``batch_id``.

    Example:
        >>> dataio.group_by("batch_id", prefetch=4)
        GroupByStage(key='batch_id', prefetch=4)
    """
    if not isinstance(key, str) or not key:
        raise PlanError(f"group_by key must be a field name, got {key!r}")
    return GroupByStage(key, positive_int(prefetch, "group_by prefetch"))


Stage = Map | Slot | BatchStage | CollateStage | GroupByStage | Op | tuple[Slot, ...]


@dataclass(frozen=True)
class Pipeline:
    """A validated, immutable plan. Use :func:`pipeline` to build one."""

    record_maps: tuple[Map, ...]
    slots: tuple[Slot, ...]
    shape: ShapeStage
    batch_maps: tuple[Map, ...] = field(default=())
    batch_ops: tuple[Op, ...] = field(default=())

    def describe(self) -> dict[str, Any]:
        """Return a JSON-ready description of the whole plan."""
        return {
            "version": PLAN_VERSION,
            "record_maps": [m.describe() for m in self.record_maps],
            "slots": [s.describe() for s in self.slots],
            "shape": self.shape.describe(),
            "batch_ops": [op.describe() for op in self.batch_ops],
            "batch_maps": [m.describe() for m in self.batch_maps],
        }

    def signature(self) -> str:
        """A stable hex digest of the plan; equal plans give equal signatures.

        Python maps enter by module and qualified name, not by code.
        """
        text = json.dumps(self.describe(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def explain(self) -> str:
        """Describe the plan as text, one stage per line; runs nothing."""
        lines = [f"pipeline {self.signature()[:12]}"]
        lines += [f"  record map  {m.describe()['map']}" for m in self.record_maps]
        for s in self.slots:
            if s.passthrough_values:
                lines.append(f"  slot {s.name!r:<12} passthrough of field {s.source_field!r}")
            else:
                chain = " -> ".join(repr(op) for op in s.ops) or "raw bytes"
                lines.append(f"  slot {s.name!r:<12} fused kernel: {chain}")
        sh = self.shape
        if isinstance(sh, BatchStage):
            lines.append(f"  batch({sh.size}, drop_last={sh.drop_last}, prefetch={sh.prefetch})")
        elif isinstance(sh, GroupByStage):
            lines.append(f"  group_by({sh.key!r}, prefetch={sh.prefetch})")
        else:
            lines.append(f"  collate(prefetch={sh.prefetch})")
        lines += [f"  batch op    {op!r}" for op in self.batch_ops]
        lines += [f"  batch map   {m.describe()['map']}" for m in self.batch_maps]
        return "\n".join(lines)

    def summary(self) -> str:
        """One line: signature prefix, slots and shape stage (reprs of loaders use it)."""
        slots = ", ".join(s.name for s in self.slots)
        return f"pipeline {self.signature()[:12]}: slots [{slots}], {_shape_text(self.shape)}"

    def apply_arrow(
        self,
        table: Any,
        *,
        positions: Any,
        seed: int = 0,
        epoch: int = 0,
        on_failure: Literal["strict", "skip"] | int = "strict",
        log_errors: bool | Callable[[Exception], Any] = False,
        errors: Literal["table", "column"] = "table",
    ) -> ArrowResult:
        """Run the record maps and slots over an Arrow table whose rows have known positions.

        The batch entry point for other engines (``dataio.ray.map_pipeline`` calls it in
        Ray Data's ``map_batches``): row ``i`` is the record at stream position
        ``positions[i]``, so its random ops draw what a local loader draws for that
        record at ``(seed, epoch)``, whatever slice of the stream the table holds. The
        shape stage is not applied (the table is one batch); batch transforms and batch
        maps are refused (they depend on a loader's batch boundaries).

        Args:
            table: a ``pyarrow.Table`` or ``RecordBatch`` of records.
            positions: each row's stream position: a column name of ``table`` or a
                sequence / array of integers ``>= 0``, one per row.
            seed: as ``run(seed=...)``.
            epoch: as ``run(epoch=...)``.
            on_failure: as ``run(on_failure=...)``, applied to the whole table: ``"strict"``
                raises the first row error; ``"skip"`` drops failed rows into
                ``rejects``; an integer requires that many survivors.
            log_errors: as ``run(log_errors=...)``.
            errors: ``"table"``: rows that failed (under ``skip`` or a survivor count)
                leave ``table`` and are listed in ``rejects``; ``"column"``: they stay in
                ``table`` too, in input order, with null slot values and an
                ``__error__`` column (``"ErrorType: message"``; null for good rows).

        Returns:
            An ``ArrowResult``: ``table`` (the columns of a ``run("arrow")`` batch, with
            ``__index__`` the positions) and ``rejects`` (``epoch``, ``position``,
            ``key``, ``slot``, ``error_type``, ``message`` per failed row).

        Raises:
            PlanError: bad positions, or a plan with batch transforms or batch maps.

        Example:
            >>> out = pipe.apply_arrow(table, positions=range(100, 164), seed=7)  # doctest: +SKIP
            >>> out.table["image"].type  # doctest: +SKIP
            FixedShapeTensorType(extension<arrow.fixed_shape_tensor[...]>)
        """
        if on_failure not in ("strict", "skip") and (
            isinstance(on_failure, bool) or not isinstance(on_failure, int) or on_failure < 0
        ):
            raise PlanError(
                f"on_failure must be 'strict', 'skip' or a survivor count >= 0, got {on_failure!r}"
            )
        for name, value in (("seed", seed), ("epoch", epoch)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise PlanError(f"{name} must be a non-negative integer, got {value!r}")
        if errors not in ("table", "column"):
            raise PlanError(f"errors must be 'table' or 'column', got {errors!r}")
        run = runtime.apply_arrow()
        result: ArrowResult = run(
            self,
            table,
            positions=positions,
            seed=seed,
            epoch=epoch,
            on_failure=on_failure,
            log_errors=log_errors,
            errors=errors,
        )
        return result

    def bind(self, records: Any) -> BoundPipeline:
        """Attach a record source (a source, sequence, iterable or factory); nothing runs
        until :meth:`BoundPipeline.run`."""
        return BoundPipeline(self, records)


def _shape_text(shape: ShapeStage) -> str:
    if isinstance(shape, BatchStage):
        return f"batch({shape.size}{', drop_last=True' if shape.drop_last else ''})"
    if isinstance(shape, GroupByStage):
        return f"group_by({shape.key!r})"
    return "collate()"


def _records_text(records: Any) -> str:
    """A short description of what was bound: a source's own repr, else type and size
    (only sizes known without iterating)."""
    if hasattr(records, "iterate") and hasattr(records, "describe"):  # a Source
        return repr(records)
    name = type(records).__name__
    if isinstance(records, list | tuple | range | dict):
        return f"{name}[{len(records)}]"
    rows = getattr(records, "num_rows", None)  # Arrow tables and batches
    return f"{name}[{rows} rows]" if isinstance(rows, int) else name


def pipeline(*stages: Stage) -> Pipeline:
    """Build a pipeline from record maps, slots, one shape stage and batch maps, in order.

    Example:
        >>> pipe = dataio.pipeline(dataio.slot("image").decode_image(), dataio.batch(8))
        >>> len(pipe.slots)
        1
    """
    record_maps: list[Map] = []
    slots: list[Slot] = []
    batch_maps: list[Map] = []
    batch_ops: list[Op] = []
    shape: ShapeStage | None = None
    stages = tuple(s for group in stages for s in (group if isinstance(group, tuple) else (group,)))
    for position, stage in enumerate(stages):
        if isinstance(stage, Chain):
            raise PlanError(
                f"{stage!r} has no record field; apply it with dataio.slots(...) or "
                "dataio.slot(name).then(chain)"
            )
        if isinstance(stage, Map):
            (record_maps if shape is None else batch_maps).append(stage)
        elif isinstance(stage, Slot):
            if shape is not None:
                raise PlanError(f"slot {stage.name!r} comes after the shape stage; move it before")
            if not stage.ops and not stage.passthrough_values:
                raise PlanError(
                    f"slot {stage.name!r} is empty; add a decoder such as .decode_image() "
                    "or call .passthrough()"
                )
            if any(s.name == stage.name for s in slots):
                raise PlanError(f"slot {stage.name!r} appears twice; slot names must be unique")
            slots.append(stage)
        elif isinstance(stage, Op) and stage.kind == "batch":
            if shape is None:
                raise PlanError(f"batch transform {stage!r} must come after the shape stage")
            if batch_maps:
                raise PlanError(
                    f"batch transform {stage!r} comes after a Python batch map; native batch "
                    "transforms must precede Python batch maps"
                )
            batch_ops.append(stage)
        elif isinstance(stage, BatchStage | CollateStage | GroupByStage):
            if shape is not None:
                raise PlanError(
                    f"a pipeline has exactly one shape stage; found {stage!r} after {shape!r}"
                )
            shape = stage
        else:
            raise PlanError(
                f"pipeline stage {position} is {stage!r}; expected dataio.map(), "
                "dataio.slot(...), dataio.batch(), dataio.collate() or dataio.group_by()"
            )
    if not slots:
        raise PlanError("a pipeline needs at least one slot")
    if shape is None:
        raise PlanError(
            "a pipeline needs a shape stage: dataio.batch(n), dataio.collate() or dataio.group_by()"
        )
    names = {s.name for s in slots}
    for op in batch_ops:
        missing = [n for n in op.params_dict().get("slots", ()) if n not in names]
        label = op.params_dict().get("label")
        if label is not None and label not in names:
            missing.append(label)
        if missing:
            raise PlanError(f"batch transform {op!r} names slots {missing} that the pipeline lacks")
    return Pipeline(tuple(record_maps), tuple(slots), shape, tuple(batch_maps), tuple(batch_ops))


Output = Literal["numpy", "torch", "arrow"]
Order = Literal["submit", "completion"]
Backend = Literal["native", "dali"]


@dataclass(frozen=True, repr=False)
class BoundPipeline:
    """A pipeline with its record source; :meth:`run` starts the engine."""

    pipeline: Pipeline
    records: Any

    def __repr__(self) -> str:
        return f"BoundPipeline({self.pipeline.summary()}, records={_records_text(self.records)})"

    def run(
        self,
        output: Output = "numpy",
        *,
        concurrency: int | Literal["auto"] = "auto",
        order: Order = "submit",
        on_failure: Literal["strict", "skip"] | int = "strict",
        log_errors: bool | Callable[[Exception], Any] = False,
        stats: bool | None = None,
        seed: int = 0,
        epoch: int = 0,
        shard: dict[str, Any] | Literal["auto"] | None = None,
        max_prefetch_bytes: int | None = None,
        device: str | None = None,
        progress: bool | Literal["auto"] | None = None,
        backend: Backend = "native",
    ) -> Loader:
        """Start loading; returns a context-managed, iterable :class:`~dataio.loader.Loader`.

        Args:
            output: ``"numpy"`` and ``"torch"`` yield :class:`~dataio.batch.Batch`;
                ``"arrow"`` yields ``pyarrow.RecordBatch`` with tensor columns.
            concurrency: records in flight for this loader (``"auto"``: as many as the
                prefetched batches hold).
            order: ``"submit"`` keeps the record order; ``"completion"`` yields each
                batch as soon as it is ready.
            on_failure: ``"strict"`` raises on the first row error; ``"skip"`` drops
                failed rows; an integer requires that many survivors per batch.
            log_errors: ``True`` logs row errors to the ``dataio.rows`` logger; a
                callable receives each error. Either way every bad row is also in
                ``Loader.rejects()``.
            stats: time each pass's stages (``Loader.stats()``) and keep the newest
                batches' samples (``Loader.lineage()``). ``None``: on for plans that
                decode or run record maps (well under 2% of an image pipeline's
                throughput), off for plans of passthrough slots only, whose batches
                take microseconds (there stats would cost 10-20%).
            seed: seeds every random op, together with ``epoch`` and the record index.
            epoch: the first pass's epoch; each later pass runs the next one (see
                ``Loader.set_epoch``). Shuffles and random ops derive from
                ``(seed, epoch)``.
            shard: ``{"id": rank, "of": world, "pad": True}`` deals records round-robin
                to ranks; ``pad=True`` gives every rank the same count by repeating its
                first record, ``pad=False`` drops the incomplete last round.
                ``"auto"`` takes rank and world size from an initialized
                ``torch.distributed`` group or the ``RANK``/``WORLD_SIZE`` variables.
            max_prefetch_bytes: bound on bytes of finished or pending batch buffers.
            device: for ``"torch"``, the device tensors are delivered on: ``"cpu"``, or
                an accelerator such as ``"cuda:0"`` (CUDA copies go through reused pinned
                buffers, each reused only after its copy finished).
            progress: ``True`` shows a tqdm bar per pass (batches, samples/s, skipped
                rows); ``None``/``"auto"`` only where stderr is a terminal or in a
                notebook, never into logs; ``False`` never (see :mod:`dataio.progress`).
            backend: ``"native"`` runs slot chains on dataio's kernels; ``"dali"`` lowers
                image chains to an NVIDIA DALI pipeline (its CPU backend, or nvJPEG and
                the GPU when ``device`` is ``"cuda:N"``); everything else is unchanged.

        Raises:
            DeviceError: ``device`` is not a torch device or is absent on this host, or
                ``backend="dali"`` without DALI installed.
            PlanError: ``backend="dali"`` and a slot uses an op DALI cannot express.

        Example:
            >>> with pipe.bind(records).run("numpy") as loader:  # doctest: +SKIP
            ...     for batch in loader:
            ...         print(batch["image"].shape)
        """
        # the runtime sits above plans and is reached through dataio.plan.runtime, never imported
        loader: type[Loader] = runtime.loader()
        return loader(
            self.pipeline,
            self.records,
            output=output,
            concurrency=concurrency,
            order=order,
            on_failure=on_failure,
            log_errors=log_errors,
            stats=stats,
            seed=seed,
            epoch=epoch,
            shard=shard,
            max_prefetch_bytes=max_prefetch_bytes,
            device=device,
            progress=progress,
            backend=backend,
        )
