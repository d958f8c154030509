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

import builtins
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal

from dataio.exceptions import PlanError
from dataio.plan import registry
from dataio.plan.ops import Op
from dataio.plan.predicates import Predicate
from dataio.plan.registry.methods import TransformMethods

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "AGGREGATES",
    "AudioNamespace",
    "BinaryNamespace",
    "ChainExpr",
    "Expr",
    "ImageNamespace",
    "StringNamespace",
    "TensorNamespace",
    "as_dtype",
    "col",
    "count",
    "lit",
]

#: Aggregate functions an :class:`Expr` can end in, for ``group_by(...).agg(...)``.
AGGREGATES = (
    "sum", "mean", "min", "max", "count", "n_unique", "first", "null_count", "std", "var",
    "median",
)  # fmt: skip

#: How :meth:`Expr.is_between` treats its bounds (as polars' ``closed=``).
CLOSED = ("both", "left", "right", "none")


class Expr:
    """An expression over the columns of a frame; build with :func:`col` and :func:`lit`.

    Comparison (``== != < <= > >=``), boolean (``& | ~``) and arithmetic (``+ - * / // %``)
    operators return new expressions; Python's ``and``/``or``/``not`` cannot be used.
    Arithmetic follows polars: ``/`` is true division (a float result, also for integer
    columns), ``//`` floor division and ``%`` the remainder with the divisor's sign; an
    integer ``//`` or ``%`` by zero is null. A derived column keeps the name of its
    leftmost column (``col("w") / col("h")`` is ``"w"``), as in polars.
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

    def __floordiv__(self, other: Any) -> Expr:
        return self._binary("//", other)

    def __rfloordiv__(self, other: Any) -> Expr:
        return self._binary("//", other, reverse=True)

    def __mod__(self, other: Any) -> Expr:
        return self._binary("%", other)

    def __rmod__(self, other: Any) -> Expr:
        return self._binary("%", other, reverse=True)

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

    def is_between(
        self,
        lower_bound: Any,
        upper_bound: Any,
        closed: Literal["both", "left", "right", "none"] = "both",
    ) -> Expr:
        """True where the value lies between the bounds (values or expressions).

        ``closed`` says which bounds are included, as in polars: ``"both"`` (the
        default), ``"left"``, ``"right"`` or ``"none"``.

        Example:
            >>> frame.filter(dataio.col("h").is_between(256, 512, closed="left"))  # doctest: +SKIP
        """
        if closed not in CLOSED:
            raise PlanError(f"is_between closed must be one of {list(CLOSED)}, got {closed!r}")
        return Expr("is_between", self, _wrap(lower_bound), _wrap(upper_bound), closed)

    def between(self, low: Any, high: Any) -> Expr:
        """True where ``low <= value <= high`` (:meth:`is_between` with both bounds)."""
        return self.is_between(low, high)

    def cast(self, dtype: Any, *, strict: bool = True) -> Expr:
        """Cast to a type; the column keeps its name.

        With ``strict=True`` (polars' default) a value that does not convert fails the
        query; with ``strict=False`` it becomes null.

        ``dtype`` is a name (``"float32"``, ``"int64"``, ``"string"``, ``"bool"``,
        polars' ``"Float32"``/``"Utf8"``..., or any ``pyarrow`` alias such as
        ``"double"`` or ``"timestamp[ms]"``), a ``pyarrow`` type, a NumPy dtype or scalar
        type, a polars dtype, or a Python type (``int``, ``float``, ``str``, ``bool``,
        ``bytes``); see :func:`as_dtype`.

        Example:
            >>> dataio.col("width").cast("float32") / dataio.col("height")  # doctest: +SKIP
        """
        if strict:
            return Expr("cast", self, as_dtype(dtype))
        return Expr("cast", self, as_dtype(dtype), False)

    def fill_null(self, value: Any) -> Expr:
        """The value, or ``value`` (a literal or an expression) where it is null."""
        return Expr("fill_null", self, _wrap(value))

    def abs(self) -> Expr:
        """The absolute value."""
        return Expr("abs", self)

    def round(
        self,
        decimals: int = 0,
        *,
        mode: Literal["half_to_even", "half_away_from_zero"] = "half_to_even",
    ) -> Expr:
        """Rounded to ``decimals`` places; halves go to the even digit by default, as in
        polars (``mode="half_away_from_zero"``: away from zero)."""
        if isinstance(decimals, bool) or not isinstance(decimals, int) or decimals < 0:
            raise PlanError(f"round decimals must be an integer >= 0, got {decimals!r}")
        if mode not in ("half_to_even", "half_away_from_zero"):
            raise PlanError(
                f"round mode must be 'half_to_even' or 'half_away_from_zero', got {mode!r}"
            )
        return Expr("round", self, decimals, mode)

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
    def str(self) -> StringNamespace:
        """String methods, as polars' ``Expr.str``: ``col("key").str.starts_with("a")``."""
        return StringNamespace(self)

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

    def null_count(self) -> Expr:
        """Number of null values in the group."""
        return Expr("agg", "null_count", self)

    def std(self) -> Expr:
        """Sample standard deviation (``ddof=1``, as polars) of the group's values."""
        return Expr("agg", "std", self)

    def var(self) -> Expr:
        """Sample variance (``ddof=1``, as polars) of the group's values."""
        return Expr("agg", "var", self)

    def median(self) -> Expr:
        """Median of the group's values (the mean of the middle two for an even count)."""
        return Expr("agg", "median", self)

    # -- introspection -------------------------------------------------------------------

    def output_name(self) -> builtins.str:
        """The column name this expression produces: its alias, else as polars names it
        (the leftmost column's name; ``"literal"`` for a literal), except that an
        aggregate is ``"<column>_<function>"`` (``"w_sum"``) and ``count()`` ``"count"``."""
        op, args = self.op, self.args
        if op == "alias":
            return str(args[1])
        if op == "col":
            return str(args[0])
        if op == "lit":
            return "literal"
        if op == "agg":
            return "count" if args[0] == "count_all" else f"{args[1].output_name()}_{args[0]}"
        if op == "binary":
            return str(args[1].output_name())
        if op == "field":
            return str(args[1])
        if op == "str":
            return str(args[1].output_name())
        if op in ("not", "neg", "is_null", "is_not_null", "is_in", "is_between", "cast") or op in (
            "fill_null",
            "abs",
            "round",
        ):
            return str(args[0].output_name())
        if op == "chain":  # like polars: an op chain keeps its column's name
            return str(args[0].output_name())
        return self.describe()

    def columns(self) -> Iterator[builtins.str]:
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

    def describe(self) -> builtins.str:
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
        if op == "is_between":
            bounds = f"{args[1].describe()}, {args[2].describe()}"
            return f"{args[0].describe()}.is_between({bounds}, closed={args[3]!r})"
        if op == "cast":
            strict = ", strict=False" if len(args) > 2 else ""
            return f"{args[0].describe()}.cast({_dtype_text(args[1])}{strict})"
        if op == "str":
            params = ", ".join(
                repr(v) if i < args[3] else f"{k}={v!r}" for i, (k, v) in enumerate(args[2])
            )
            return f"{args[1].describe()}.str.{args[0]}({params})"
        if op == "field":
            return f"{args[0].describe()}.field({args[1]!r})"
        if op == "fill_null":
            return f"{args[0].describe()}.fill_null({args[1].describe()})"
        if op == "abs":
            return f"{args[0].describe()}.abs()"
        if op == "round":
            return f"{args[0].describe()}.round({args[1]}, mode={args[2]!r})"
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

    def __repr__(self) -> builtins.str:
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


#: dtype names polars and NumPy users write, lowercased, beyond pyarrow's own aliases
_DTYPE_NAMES = {
    "bool": "bool", "boolean": "bool", "str": "string", "string": "string", "utf8": "string",
    "binary": "binary", "bytes": "binary", "float": "float64", "float16": "float16",
    "float32": "float32", "float64": "float64", "int8": "int8", "int16": "int16",
    "int32": "int32", "int64": "int64", "uint8": "uint8", "uint16": "uint16",
    "uint32": "uint32", "uint64": "uint64", "int": "int64", "date": "date32",
    "datetime": "timestamp[us]", "null": "null",
}  # fmt: skip
_PYTHON_TYPES = {bool: "bool", int: "int64", float: "float64", str: "string", bytes: "binary"}


def as_dtype(value: Any) -> pa.DataType:
    """A ``pyarrow`` type for a dtype as users write it.

    Takes a name (``"float32"``, ``"int64"``, ``"string"``, ``"bool"``, polars' names
    such as ``"Float32"`` or ``"Utf8"``, or a ``pyarrow`` alias such as ``"double"`` or
    ``"timestamp[ms]"``), a ``pyarrow`` type, a NumPy dtype or scalar type
    (``np.float32``), a polars dtype (``pl.Float32``) or a Python type (``int``,
    ``float``, ``str``, ``bool``, ``bytes``). ``"float"`` and ``float`` are 64-bit, as
    in NumPy and Python.

    Example:
        >>> as_dtype("float32")  # doctest: +SKIP
        DataType(float)
    """
    import pyarrow as pa

    if isinstance(value, pa.DataType):
        return value
    if isinstance(value, type) and value in _PYTHON_TYPES:
        return pa.type_for_alias(_PYTHON_TYPES[value])
    module = (value.__module__ if isinstance(value, type) else type(value).__module__) or ""
    if module.split(".")[0] == "numpy":
        import numpy as np

        try:
            return pa.from_numpy_dtype(np.dtype(value))
        except (TypeError, ValueError, pa.ArrowNotImplementedError) as exc:
            raise PlanError(f"cast(): NumPy dtype {value!r} has no Arrow type") from exc
    if module.split(".")[0] == "polars":
        value = str(value)
    if isinstance(value, str):
        name = _DTYPE_NAMES.get(value.lower(), value)
        try:
            return pa.type_for_alias(name)
        except ValueError:
            pass
    raise PlanError(
        f"cast() takes a dtype name (e.g. 'float32', 'int64', 'string', 'bool'), a pyarrow "
        f"type, a NumPy dtype, a polars dtype or int/float/str/bool/bytes; got {value!r}"
    )


def _dtype_text(dtype: Any) -> builtins.str:
    """A type as plans show it: Arrow's names, but ``float32`` for Arrow's ``float``
    (which reads as Python's 64-bit ``float``)."""
    text = builtins.str(dtype)
    return {"halffloat": "float16", "float": "float32", "double": "float64"}.get(text, text)


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


# -- strings -------------------------------------------------------------------------------

_WHITESPACE = " \t\n\r\x0b\x0c"


class StringNamespace:
    r"""``col(...).str``: string methods named and behaving as polars' ``Expr.str``.

    Patterns are regular expressions (Rust ``regex`` syntax, as polars) unless
    ``literal=True``; lengths and slices count characters unless named ``bytes``.

    Example:
        >>> frame.filter(dataio.col("key").str.contains(r"^img_\d+$"))  # doctest: +SKIP
    """

    __slots__ = ("_base",)

    def __init__(self, base: Expr) -> None:
        self._base = base

    def _op(self, name: str, positional: int = 0, **params: Any) -> Expr:
        return Expr("str", name, self._base, tuple(params.items()), positional)

    def contains(self, pattern: str, *, literal: bool = False) -> Expr:
        """True where the value matches the regular expression (or holds ``pattern``)."""
        return self._op("contains", 1, pattern=_text(pattern, "pattern"), literal=bool(literal))

    def starts_with(self, prefix: str) -> Expr:
        """True where the value starts with ``prefix``."""
        return self._op("starts_with", 1, prefix=_text(prefix, "prefix"))

    def ends_with(self, suffix: str) -> Expr:
        """True where the value ends with ``suffix``."""
        return self._op("ends_with", 1, suffix=_text(suffix, "suffix"))

    def len_chars(self) -> Expr:
        """The number of characters (``uint32``)."""
        return self._op("len_chars")

    def len_bytes(self) -> Expr:
        """The number of UTF-8 bytes (``uint32``)."""
        return self._op("len_bytes")

    def lengths(self) -> Expr:
        """polars' older name of :meth:`len_bytes` (the UTF-8 byte count)."""
        return self.len_bytes()

    def to_lowercase(self) -> Expr:
        """The value in lower case."""
        return self._op("to_lowercase")

    def to_uppercase(self) -> Expr:
        """The value in upper case."""
        return self._op("to_uppercase")

    def replace(self, pattern: str, value: str, *, literal: bool = False, n: int = 1) -> Expr:
        """Replace the first match of ``pattern`` with ``value`` (``$1`` names a group).

        Only ``n=1`` is supported: :meth:`replace_all` replaces every match.
        """
        if n != 1:
            raise PlanError(f"str.replace supports n=1 only, got n={n!r}; use str.replace_all")
        return self._op(
            "replace",
            2,
            pattern=_text(pattern, "pattern"),
            value=_text(value, "value"),
            literal=bool(literal),
        )

    def replace_all(self, pattern: str, value: str, *, literal: bool = False) -> Expr:
        """Replace every match of ``pattern`` with ``value``."""
        return self._op(
            "replace_all",
            2,
            pattern=_text(pattern, "pattern"),
            value=_text(value, "value"),
            literal=bool(literal),
        )

    def slice(self, offset: int, length: int | None = None) -> Expr:
        """``length`` characters (all by default) from ``offset`` (negative: from the end)."""
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise PlanError(f"str.slice offset must be an integer, got {offset!r}")
        if length is not None and (
            isinstance(length, bool) or not isinstance(length, int) or length < 0
        ):
            raise PlanError(f"str.slice length must be an integer >= 0 or None, got {length!r}")
        return self._op("slice", 2, offset=offset, length=length)

    def head(self, n: int) -> Expr:
        """The first ``n`` characters (negative: all but the last ``-n``)."""
        return self._op("head", 1, n=_integer(n, "str.head n"))

    def tail(self, n: int) -> Expr:
        """The last ``n`` characters (negative: all but the first ``-n``)."""
        return self._op("tail", 1, n=_integer(n, "str.tail n"))

    def strip_chars(self, characters: str | None = None) -> Expr:
        """Remove leading and trailing ``characters`` (whitespace by default)."""
        return self._op("strip_chars", 1, characters=_strip_set(characters))

    def strip_chars_start(self, characters: str | None = None) -> Expr:
        """Remove leading ``characters`` (whitespace by default)."""
        return self._op("strip_chars_start", 1, characters=_strip_set(characters))

    def strip_chars_end(self, characters: str | None = None) -> Expr:
        """Remove trailing ``characters`` (whitespace by default)."""
        return self._op("strip_chars_end", 1, characters=_strip_set(characters))


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise PlanError(f"str methods take a string {what}, got {value!r}")
    return value


def _integer(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(f"{what} must be an integer, got {value!r}")
    return value


def _strip_set(characters: str | None) -> str:
    return _WHITESPACE if characters is None else _text(characters, "characters")
