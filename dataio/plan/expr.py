"""Column expressions for lazy frames: ``dataio.col("x") > 3``, ``dataio.lit(...)``.

An :class:`Expr` is a small immutable tree. Operators build new trees; nothing is
evaluated here. The engine (``dataio/engine/expressions.py``) compiles a tree to a DataFusion
expression when a frame runs, and :meth:`Expr.describe` gives the stable text used in
plans, reprs and source signatures.

Example:
    >>> from dataio import col, lit  # doctest: +SKIP
    >>> ((col("height") > 512) & col("label").is_in([1, 2])).describe()  # doctest: +SKIP
    '((col("height") > 512) & col("label").is_in([1, 2]))'
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from dataio.exceptions import PlanError
from dataio.plan import registry
from dataio.plan.ops import Op
from dataio.plan.predicates import Predicate
from dataio.plan.registry.methods import TransformMethods

__all__ = [
    "AGGREGATES",
    "AudioNamespace",
    "BinaryNamespace",
    "ChainExpr",
    "Expr",
    "ImageNamespace",
    "TensorNamespace",
    "col",
    "count",
    "lit",
]

#: Aggregate functions an :class:`Expr` can end in, for ``group_by(...).agg(...)``.
AGGREGATES = ("sum", "mean", "min", "max", "count", "n_unique", "first")


class Expr:
    """An expression over the columns of a frame; build with :func:`col` and :func:`lit`.

    Comparison (``== != < <= > >=``), boolean (``& | ~``) and arithmetic (``+ - * / %``)
    operators return new expressions; Python's ``and``/``or``/``not`` cannot be used.
    """

    __slots__ = ("args", "op")

    def __init__(self, op: str, *args: Any) -> None:
        self.op = op
        self.args = args

    # -- operators ---------------------------------------------------------------------

    def walk(self) -> Iterator[Expr]:
        """This expression and every expression inside it, depth first."""
        yield self
        for arg in self.args:
            items = arg if isinstance(arg, tuple) else (arg,)
            for item in items:
                if isinstance(item, Expr):
                    yield from item.walk()

    def _binary(self, symbol: str, other: Any, *, reverse: bool = False) -> Expr:
        other = _wrap(other)
        return (
            Expr("binary", symbol, other, self) if reverse else Expr("binary", symbol, self, other)
        )

    def __eq__(self, other: Any) -> Expr:  # type: ignore[override]
        return self._binary("==", other)

    def __ne__(self, other: Any) -> Expr:  # type: ignore[override]
        return self._binary("!=", other)

    def __lt__(self, other: Any) -> Expr:
        return self._binary("<", other)

    def __le__(self, other: Any) -> Expr:
        return self._binary("<=", other)

    def __gt__(self, other: Any) -> Expr:
        return self._binary(">", other)

    def __ge__(self, other: Any) -> Expr:
        return self._binary(">=", other)

    def __and__(self, other: Any) -> Expr:
        return self._binary("&", other)

    def __rand__(self, other: Any) -> Expr:
        return self._binary("&", other, reverse=True)

    def __or__(self, other: Any) -> Expr:
        return self._binary("|", other)

    def __ror__(self, other: Any) -> Expr:
        return self._binary("|", other, reverse=True)

    def __add__(self, other: Any) -> Expr:
        return self._binary("+", other)

    def __radd__(self, other: Any) -> Expr:
        return self._binary("+", other, reverse=True)

    def __sub__(self, other: Any) -> Expr:
        return self._binary("-", other)

    def __rsub__(self, other: Any) -> Expr:
        return self._binary("-", other, reverse=True)

    def __mul__(self, other: Any) -> Expr:
        return self._binary("*", other)

    def __rmul__(self, other: Any) -> Expr:
        return self._binary("*", other, reverse=True)

    def __truediv__(self, other: Any) -> Expr:
        return self._binary("/", other)

    def __rtruediv__(self, other: Any) -> Expr:
        return self._binary("/", other, reverse=True)

    def __mod__(self, other: Any) -> Expr:
        return self._binary("%", other)

    def __invert__(self) -> Expr:
        return Expr("not", self)

    def __neg__(self) -> Expr:
        return Expr("neg", self)

    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        raise PlanError(
            f"the truth value of expression {self.describe()} is not known until the frame "
            "runs; combine conditions with & | ~ (not and/or/not) and wrap each in parentheses"
        )

    # -- methods -----------------------------------------------------------------------

    def alias(self, name: str) -> Expr:
        """Name the result column."""
        if not isinstance(name, str) or not name:
            raise PlanError(f"alias needs a non-empty string, got {name!r}")
        return Expr("alias", self, name)

    def is_null(self) -> Expr:
        """True where the value is null."""
        return Expr("is_null", self)

    def is_not_null(self) -> Expr:
        """True where the value is not null."""
        return Expr("is_not_null", self)

    def is_in(self, values: Iterable[Any]) -> Expr:
        """True where the value is one of ``values`` (plain Python values)."""
        if isinstance(values, str | bytes):
            raise PlanError(f"is_in needs a list of values, got {values!r}")
        items = tuple(values)
        if any(isinstance(v, Expr) for v in items):
            raise PlanError("is_in takes plain values, not expressions")
        return Expr("is_in", self, items)

    def between(self, low: Any, high: Any) -> Expr:
        """True where ``low <= value <= high``."""
        return (self >= low) & (self <= high)

    def cast(self, dtype: Any) -> Expr:
        """Cast to a ``pyarrow`` data type (e.g. ``pa.float32()``)."""
        return Expr("cast", self, dtype)

    def field(self, name: str) -> Expr:
        """A field of a struct column, e.g. ``col("size").field("width")``."""
        return Expr("field", self, name)

    def decode_image(self, mode: str = "rgb") -> Expr:
        """The ``decode_image`` SQL function: a struct of height, width, channels and pixels.

        For decoded tensors (and ops after the decoder) use ``.image.decode()``.
        """
        checked = registry.decode_image.op(mode=mode).param("mode")  # type: ignore[arg-type]
        return Expr("call", "decode_image", (self, lit(checked)))

    def image_size(self) -> Expr:
        """The ``image_size`` kernel: a struct of height and width, read from the header."""
        return Expr("call", "image_size", (self,))

    # -- op namespaces (chains of registry ops) ---------------------------------------------

    @property
    def image(self) -> ImageNamespace:
        """Image decoders: ``col("jpeg").image.decode(mode="rgb").resize_short(256)...``."""
        return ImageNamespace(self)

    @property
    def audio(self) -> AudioNamespace:
        """Audio decoders: ``col("wav").audio.decode(sample_rate=16000).fix_length(16000)``."""
        return AudioNamespace(self)

    @property
    def tensor(self) -> TensorNamespace:
        """Tensor decoders: ``.decode_numpy()``, ``.decode_safetensors(key=)``, ``.decode_pt()``."""
        return TensorNamespace(self)

    @property
    def bin(self) -> BinaryNamespace:
        """Bytes to Python values: ``.decode_text()``, ``.decode_json()``, ``.decode_bytes()``."""
        return BinaryNamespace(self)

    # -- aggregates ---------------------------------------------------------------------

    def sum(self) -> Expr:
        """Sum of the group's values."""
        return Expr("agg", "sum", self)

    def mean(self) -> Expr:
        """Mean of the group's values."""
        return Expr("agg", "mean", self)

    def min(self) -> Expr:
        """Smallest value of the group."""
        return Expr("agg", "min", self)

    def max(self) -> Expr:
        """Largest value of the group."""
        return Expr("agg", "max", self)

    def count(self) -> Expr:
        """Number of non-null values in the group."""
        return Expr("agg", "count", self)

    def n_unique(self) -> Expr:
        """Number of distinct non-null values in the group."""
        return Expr("agg", "n_unique", self)

    def first(self) -> Expr:
        """The group's first value (in the order rows reach the aggregate)."""
        return Expr("agg", "first", self)

    # -- introspection -------------------------------------------------------------------

    def output_name(self) -> str:
        """The column name this expression produces (its alias, or a derived name)."""
        if self.op == "alias":
            return str(self.args[1])
        if self.op == "col":
            return str(self.args[0])
        if self.op == "agg" and self.args[0] != "count_all":
            return f"{self.args[1].output_name()}_{self.args[0]}"
        if self.op == "agg":
            return "count"
        if self.op == "chain":  # like polars: an op chain keeps its column's name
            return str(self.args[0].output_name())
        return self.describe()

    def columns(self) -> Iterator[str]:
        """The names of the columns this expression reads."""
        if self.op == "col":
            yield self.args[0]
        for arg in self.args:
            if isinstance(arg, Expr):
                yield from arg.columns()
            elif isinstance(arg, tuple):
                for item in arg:
                    if isinstance(item, Expr):
                        yield from item.columns()

    def is_aggregate(self) -> bool:
        """True when the expression ends in an aggregate (possibly aliased)."""
        if self.op == "alias":
            return bool(self.args[0].is_aggregate())
        return self.op == "agg"

    def describe(self) -> str:
        """Stable text for plans, reprs and signatures."""
        op, args = self.op, self.args
        if op == "col":
            return f"col({args[0]!r})"
        if op == "lit":
            return _lit_text(args[0])
        if op == "binary":
            return f"({args[1].describe()} {args[0]} {args[2].describe()})"
        if op == "not":
            return f"~{args[0].describe()}"
        if op == "neg":
            return f"-{args[0].describe()}"
        if op in ("is_null", "is_not_null"):
            return f"{args[0].describe()}.{op}()"
        if op == "is_in":
            return f"{args[0].describe()}.is_in([{', '.join(_lit_text(v) for v in args[1])}])"
        if op == "cast":
            return f"{args[0].describe()}.cast({args[1]})"
        if op == "field":
            return f"{args[0].describe()}.field({args[1]!r})"
        if op == "alias":
            return f"{args[0].describe()}.alias({args[1]!r})"
        if op == "call":
            inner = ", ".join(a.describe() for a in args[1][1:])
            return f"{args[1][0].describe()}.{args[0]}({inner})"
        if op == "agg":
            return "count()" if args[0] == "count_all" else f"{args[1].describe()}.{args[0]}()"
        if op == "chain":
            seed = f".seed({args[2]})" if len(args) > 2 and args[2] is not None else ""
            return args[0].describe() + "".join(f".{op!r}" for op in args[1]) + seed
        raise PlanError(f"unknown expression node {op!r}")  # pragma: no cover

    def __repr__(self) -> str:
        return self.describe()


def col(name: str) -> Expr:
    """A column of the frame, by name.

    Example:
        >>> frame.filter(dataio.col("height") > 512)  # doctest: +SKIP
    """
    if not isinstance(name, str) or not name:
        raise PlanError(f"col() needs a column name, got {name!r}")
    return Expr("col", name)


def lit(value: Any) -> Expr:
    """A literal value: ``None``, bool, int, float, str or bytes.

    Example:
        >>> dataio.col("split") == dataio.lit("train")  # doctest: +SKIP
    """
    if isinstance(value, Expr):
        return value
    if value is not None and not isinstance(value, bool | int | float | str | bytes):
        raise PlanError(
            f"lit() takes None, bool, int, float, str or bytes, got {type(value).__name__} "
            f"{value!r}; cast the column instead (col(...).cast(...))"
        )
    return Expr("lit", value)


def count() -> Expr:
    """The number of rows in each group, for ``group_by(...).agg(dataio.count())``."""
    return Expr("agg", "count_all", None)


def _wrap(value: Any) -> Expr:
    return value if isinstance(value, Expr) else lit(value)


def _lit_text(value: Any) -> str:
    return repr(value)


# -- op chains -----------------------------------------------------------------------------


class ChainExpr(Expr, TransformMethods):
    """``Expr("chain", base, ops)``: registry ops applied to a column, as in a slot chain.

    ``ops`` are the same :class:`~dataio.plan.ops.Op` values a slot chain holds (the decoder
    first) and are validated the same way. Start one from a namespace
    (``col("jpeg").image.decode()``); the methods append ops and return a new chain.
    A chain with random ops needs :meth:`seed` to run in a frame or in SQL.

    Example:
        >>> col("jpeg").image.decode().resize_short(256).center_crop(224)  # doctest: +SKIP
        col('jpeg').decode_image(mode='rgb').resize_short(size=256).center_crop(h=224, w=224)
    """

    __slots__ = ()

    @property
    def base(self) -> Expr:
        """The expression the chain decodes."""
        return self.args[0]

    @property
    def ops(self) -> tuple[Op, ...]:
        """The chain's ops, decoder first."""
        return self.args[1]

    @property
    def chain_seed(self) -> int | None:
        """The seed given with :meth:`seed`, or ``None``."""
        return self.args[2] if len(self.args) > 2 else None

    def seed(self, seed: int) -> ChainExpr:
        """Seed the chain's random ops, as ``pipeline.run(seed=seed)`` seeds a slot.

        Row ``i`` of a frame (its position in the frame's order, where the chain runs)
        draws from the generator a single-slot pipeline over the same frame uses for
        record ``i`` at epoch 0, so a frame column equals the batches of
        ``pipeline(slot(...).<same chain>, batch(n)).bind(frame).run(seed=seed)``. As a
        SQL function, the chain takes each row's position as a second argument:
        ``prep(jpeg, pos)``.

        Example:
            >>> prep = col("jpeg").image.decode().random_crop(224).seed(0)  # doctest: +SKIP
            >>> frame.with_columns(x=prep)  # doctest: +SKIP
        """
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise PlanError(f"{self.describe()}: seed() needs an integer >= 0, got {seed!r}")
        return _chain(self.base, self.ops, seed)

    def then(self, *ops: Op) -> ChainExpr:
        """Append ops built by :mod:`dataio.decoders` / :mod:`dataio.transforms`."""
        for op in ops:
            if not isinstance(op, Op):
                raise PlanError(f"{self.describe()}: expected an op, got {op!r}")
        chain = self.ops + ops
        registry.validate_chain(f"expression {self.base.describe()}", chain)
        return _chain(self.base, chain, self.chain_seed)

    def when(self, predicate: Predicate) -> registry.When[ChainExpr]:
        """Branch on the decoded value's shape: ``.when(p).then(*ops).otherwise(*ops)``.

        Example:
            >>> from dataio import cond as c, transforms as t  # doctest: +SKIP
            >>> (col("jpeg").image.decode().when(c.shape(axis=0).gt(512))  # doctest: +SKIP
            ...  .then(t.center_crop(512)).otherwise(t.resize((512, 512))))
        """
        where = f"expression {self.base.describe()}"
        return registry.When(self, registry.check_when(where, self.ops, predicate), where)

    def otherwise(self, *ops: Op) -> ChainExpr:
        """The ops of the last ``when`` branch's false side."""
        where = f"expression {self.base.describe()}"
        chain = registry.with_otherwise(where, self.ops, ops)
        return _chain(self.base, chain, self.chain_seed)


def _chain(base: Expr, ops: tuple[Op, ...], seed: int | None) -> ChainExpr:
    """``Expr("chain", base, ops)``, with the seed as a third argument when there is one."""
    if seed is None:
        return ChainExpr("chain", base, ops)
    return ChainExpr("chain", base, ops, seed)


class _Namespace:
    __slots__ = ("_base",)

    def __init__(self, base: Expr) -> None:
        self._base = base

    def start(self, op: Op) -> ChainExpr:
        """A chain expression decoding this namespace's column with ``op``."""
        if isinstance(self._base, ChainExpr):
            raise PlanError(
                f"{self._base.describe()} is already decoded; a chain holds one decoder"
            )
        return ChainExpr("chain", self._base, ()).then(op)


class ImageNamespace(_Namespace):
    """``col(...).image``: decode image bytes (or paths), then chain image ops."""

    __slots__ = ()
    decode = registry.decoder_method(registry.decode_image)


class AudioNamespace(_Namespace):
    """``col(...).audio``: decode audio bytes (or paths), then chain audio ops."""

    __slots__ = ()
    decode = registry.decoder_method(registry.decode_audio)


class TensorNamespace(_Namespace):
    """``col(...).tensor``: decode NPY, safetensors or ``torch.save`` bytes (or paths)."""

    __slots__ = ()
    decode_numpy = registry.decoder_method(registry.decode_numpy)
    decode_safetensors = registry.decoder_method(registry.decode_safetensors)
    decode_pt = registry.decoder_method(registry.decode_pt)


class BinaryNamespace(_Namespace):
    """``col(...).bin``: bytes (or paths) to Python values: text, JSON, raw bytes."""

    __slots__ = ()
    decode_text = registry.decoder_method(registry.decode_text)
    decode_json = registry.decoder_method(registry.decode_json)
    decode_bytes = registry.decoder_method(registry.decode_bytes)
