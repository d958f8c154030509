"""The pipeline DSL: immutable plan values. Building a plan does no work.

A pipeline is ``[record maps] slots... shape-stage [batch maps]``:

* record maps (:func:`map` before the shape stage) see each input record;
* slots (:func:`slot`) each turn one record field into one batch column;
* exactly one shape stage (:func:`batch`) groups the ordered stream;
* batch maps (:func:`map` after the shape stage) see each :class:`~dataio.batch.Batch`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from dataio import decoders, transforms
from dataio.exceptions import PlanError
from dataio.ops import Op, positive_int

if TYPE_CHECKING:
    from dataio.loader import Loader

__all__ = [
    "BatchStage",
    "BoundPipeline",
    "CollateStage",
    "GroupByStage",
    "Map",
    "Pipeline",
    "Slot",
    "batch",
    "collate",
    "group_by",
    "map",
    "pipeline",
    "slot",
]

PLAN_VERSION = 1


def _callable_name(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}.{name}"


@dataclass(frozen=True)
class Map:
    """A Python function applied to each record (before the shape stage) or batch (after)."""

    fn: Callable[[Any], Any]

    def describe(self) -> dict[str, Any]:
        """Return a JSON-ready description (the function is named, not hashed)."""
        return {"map": _callable_name(self.fn)}


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
class Slot:
    """One field of a record turned into one column of every batch.

    A slot is either a chain of ops (a decoder first, then transforms) or a passthrough
    of the Python value. Methods return a new slot; the original is unchanged.
    """

    name: str
    ops: tuple[Op, ...] = ()
    passthrough_values: bool = False
    field_name: str | None = None

    @property
    def source_field(self) -> str:
        """The record field this slot reads (its name unless ``field=`` was given)."""
        return self.field_name or self.name

    def then(self, *ops: Op) -> Slot:
        """Append ops built by :mod:`dataio.decoders` / :mod:`dataio.transforms`.

        Example:
            >>> from dataio import decoders, transforms
            >>> dataio.slot("image").then(decoders.image(), transforms.resize_short(64))
            slot('image').decode_image(mode='rgb').resize_short(size=64)
        """
        if self.passthrough_values:
            raise PlanError(f"slot {self.name!r} is a passthrough; it takes no ops")
        for op in ops:
            if not isinstance(op, Op):
                raise PlanError(f"slot {self.name!r}: expected an op, got {op!r}")
        chain = self.ops + tuple(ops)
        _validate_chain(self.name, chain)
        return replace(self, ops=chain)

    chain = then

    def decode_image(self, *, mode: decoders.ImageMode = "rgb") -> Slot:
        """Decode image bytes; see :func:`dataio.decoders.image`."""
        return self.then(decoders.image(mode=mode))

    def decode_numpy(self) -> Slot:
        """Decode NPY bytes; see :func:`dataio.decoders.numpy`."""
        return self.then(decoders.numpy())

    def decode_safetensors(self, *, key: str | None = None) -> Slot:
        """Decode one safetensors tensor; see :func:`dataio.decoders.safetensors`."""
        return self.then(decoders.safetensors(key=key))

    def resize(self, *, h: int, w: int) -> Slot:
        """Resize to ``h`` x ``w``; see :func:`dataio.transforms.resize`."""
        return self.then(transforms.resize(h=h, w=w))

    def resize_short(self, size: int) -> Slot:
        """Resize the short side to ``size``; see :func:`dataio.transforms.resize_short`."""
        return self.then(transforms.resize_short(size))

    def center_crop(self, *, h: int, w: int) -> Slot:
        """Crop the center; see :func:`dataio.transforms.center_crop`."""
        return self.then(transforms.center_crop(h=h, w=w))

    def random_crop(self, *, h: int, w: int) -> Slot:
        """Crop at a random position; see :func:`dataio.transforms.random_crop`."""
        return self.then(transforms.random_crop(h=h, w=w))

    def random_resized_crop(self, *, h: int, w: int, **options: Any) -> Slot:
        """Random area/aspect crop; see :func:`dataio.transforms.random_resized_crop`."""
        return self.then(transforms.random_resized_crop(h=h, w=w, **options))

    def random_flip(self, **options: Any) -> Slot:
        """Random mirror; see :func:`dataio.transforms.random_flip`."""
        return self.then(transforms.random_flip(**options))

    def normalize(self, preset: Literal["imagenet"] | None = None, **options: Any) -> Slot:
        """Normalize to float32; see :func:`dataio.transforms.normalize`."""
        return self.then(transforms.normalize(preset, **options))

    def output(self, **options: Any) -> Slot:
        """Set dtype and layout; see :func:`dataio.transforms.output`."""
        return self.then(transforms.output(**options))

    def passthrough(self) -> Slot:
        """Deliver the field's Python values unchanged, as a list in row order.

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
        if self.passthrough_values:
            body["passthrough"] = True
        else:
            body["ops"] = [op.describe() for op in self.ops]
        return body

    def __repr__(self) -> str:
        head = f"slot({self.name!r})"
        if self.passthrough_values:
            return head + ".passthrough()"
        return head + "".join(f".{op!r}" for op in self.ops)


def _validate_chain(name: str, ops: tuple[Op, ...]) -> None:
    kinds = [op.kind for op in ops]
    if kinds and kinds[0] != "decode":
        raise PlanError(
            f"slot {name!r}: the chain must start with a decoder such as .decode_image(), "
            f"got {ops[0]!r}"
        )
    if kinds.count("decode") > 1:
        raise PlanError(f"slot {name!r}: a chain holds one decoder, got {kinds.count('decode')}")
    order = {"decode": 0, "geometry": 1, "normalize": 2, "output": 3}
    for previous, op in itertools.pairwise(ops):
        if order[op.kind] < order[previous.kind]:
            raise PlanError(
                f"slot {name!r}: {op!r} cannot follow {previous!r}; "
                "order a chain as decode, geometry ops, normalize, output"
            )
        if op.kind in ("normalize", "output") and op.kind == previous.kind:
            raise PlanError(f"slot {name!r}: {op.name} appears twice")
    normalize = next((op for op in ops if op.kind == "normalize"), None)
    out = next((op for op in ops if op.kind == "output"), None)
    if normalize is not None and out is not None and out.param("dtype") == "uint8":
        raise PlanError(f"slot {name!r}: normalize produces float32; drop output(dtype='uint8')")


def slot(name: str, *, field: str | None = None) -> Slot:
    """Start a slot chain for record field ``name`` (or ``field`` when it differs).

    Example:
        >>> dataio.slot("image").decode_image(mode="rgb").resize_short(256)
        slot('image').decode_image(mode='rgb').resize_short(size=256)
    """
    if not isinstance(name, str) or not name:
        raise PlanError(f"slot name must be a non-empty string, got {name!r}")
    return Slot(name, field_name=field)


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


Stage = Map | Slot | BatchStage | CollateStage | GroupByStage


@dataclass(frozen=True)
class Pipeline:
    """A validated, immutable plan. Use :func:`pipeline` to build one."""

    record_maps: tuple[Map, ...]
    slots: tuple[Slot, ...]
    shape: ShapeStage
    batch_maps: tuple[Map, ...] = field(default=())

    def describe(self) -> dict[str, Any]:
        """Return a JSON-ready description of the whole plan."""
        return {
            "version": PLAN_VERSION,
            "record_maps": [m.describe() for m in self.record_maps],
            "slots": [s.describe() for s in self.slots],
            "shape": self.shape.describe(),
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
        lines += [f"  batch map   {m.describe()['map']}" for m in self.batch_maps]
        return "\n".join(lines)

    def bind(self, records: Any) -> BoundPipeline:
        """Attach a record source (a source, sequence, iterable or factory); nothing runs
        until :meth:`BoundPipeline.run`."""
        return BoundPipeline(self, records)


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
    shape: ShapeStage | None = None
    for position, stage in enumerate(stages):
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
    return Pipeline(tuple(record_maps), tuple(slots), shape, tuple(batch_maps))


Output = Literal["numpy", "torch", "arrow"]
Order = Literal["submit", "completion"]


@dataclass(frozen=True)
class BoundPipeline:
    """A pipeline with its record source; :meth:`run` starts the engine."""

    pipeline: Pipeline
    records: Any

    def run(
        self,
        output: Output = "numpy",
        *,
        concurrency: int | Literal["auto"] = "auto",
        order: Order = "submit",
        on_failure: Literal["strict", "skip"] | int = "strict",
        log_errors: bool | Callable[[Exception], Any] = False,
        seed: int = 0,
        epoch: int = 0,
        shard: dict[str, Any] | None = None,
        max_prefetch_bytes: int | None = None,
        device: str | None = None,
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
                callable receives each error.
            seed: seeds every random op, together with ``epoch`` and the record index.
            epoch: the epoch number mixed into random ops (see ``Loader.set_epoch``).
            shard: ``{"id": rank, "of": world, "pad": True}`` deals records round-robin
                to ranks; ``pad=True`` gives every rank the same count by repeating its
                first record, ``pad=False`` drops the incomplete last round.
            max_prefetch_bytes: bound on bytes of finished or pending batch buffers.
            device: for ``"torch"``, a device such as ``"cuda:0"`` to move tensors to.

        Example:
            >>> with pipe.bind(records).run("numpy") as loader:  # doctest: +SKIP
            ...     for batch in loader:
            ...         print(batch["image"].shape)
        """
        from dataio.loader import Loader

        return Loader(
            self.pipeline,
            self.records,
            output=output,
            concurrency=concurrency,
            order=order,
            on_failure=on_failure,
            log_errors=log_errors,
            seed=seed,
            epoch=epoch,
            shard=shard,
            max_prefetch_bytes=max_prefetch_bytes,
            device=device,
        )
