"""HDF5 datasets through h5py (imported on first use), with zero-copy contiguous reads.

``copy=False`` returns read-only arrays that outlive the file handle: a contiguous,
unfiltered numeric dataset is a view of a read-only mapping of the file at the
dataset's offset; anything else (chunked, compressed, strings, compound types) is read
by h5py, which decodes only the chunks the selection intersects.
"""

from __future__ import annotations

import mmap
import numbers
import os
from collections.abc import Callable, Iterable, Iterator
from types import EllipsisType
from typing import TYPE_CHECKING, Any

import numpy as np

from dataio import limits
from dataio._closing import Closing
from dataio.exceptions import (
    DataioError,
    FieldError,
    FormatError,
    NotFoundError,
    PermissionDeniedError,
    PlanError,
)
from dataio.formats._scan import Source, file_records, tensor_type, tensor_values
from dataio.io.ranged import RangedFile, is_local, local_path

if TYPE_CHECKING:
    from dataio.frame import LazyFrame

__all__ = ["Hdf5File", "open_hdf5", "read_hdf5", "scan_hdf5"]

Selection = int | slice | EllipsisType | tuple[int | slice | EllipsisType, ...] | None


def _h5py() -> Any:
    try:
        import h5py
    except ImportError:
        raise DataioError("HDF5 needs h5py; install it with pip install 'dataio[hdf5]'") from None
    return h5py


def normalize_selection(
    selection: Selection, shape: tuple[int, ...], *, source: str
) -> tuple[Any, ...]:
    """Check a selection and spell it out as one int or slice per axis.

    Accepts integers (negative counts from the end), slices with a positive step and
    at most one Ellipsis; refuses everything else (lists, arrays, booleans, ``None``).
    """
    items = () if selection is None else selection if isinstance(selection, tuple) else (selection,)
    ellipses = sum(1 for item in items if item is Ellipsis)
    if ellipses > 1:
        raise PlanError(f"{source}: a selection holds at most one Ellipsis, got {selection!r}")
    explicit = len(items) - ellipses
    if explicit > len(shape):
        raise PlanError(
            f"{source}: selection {selection!r} has {explicit} indices for {len(shape)} axes"
        )
    out: list[Any] = []
    for item in items:
        if item is Ellipsis:
            out.extend([slice(None)] * (len(shape) - explicit))
            continue
        axis = len(out)
        if isinstance(item, numbers.Integral) and not isinstance(item, bool | np.bool_):
            index = int(item)
            if not -shape[axis] <= index < shape[axis]:
                raise PlanError(
                    f"{source}: index {index} is out of range for axis {axis} of size {shape[axis]}"
                )
            out.append(index % shape[axis])
        elif isinstance(item, slice):
            parts = (item.start, item.stop, item.step)
            if not all(
                p is None or (isinstance(p, numbers.Integral) and not isinstance(p, bool))
                for p in parts
            ):
                raise PlanError(f"{source}: slice {item!r} must hold integers or None")
            if item.step is not None and item.step <= 0:
                raise PlanError(
                    f"{source}: slice {item!r} needs a positive step; reverse the result instead"
                )
            out.append(slice(*item.indices(shape[axis])))
        else:
            raise PlanError(
                f"{source}: selection items are integers, positive-step slices or one Ellipsis; "
                f"got {item!r}"
            )
    out.extend([slice(None)] * (len(shape) - len(out)))
    return tuple(out)


class Hdf5File(Closing):
    """An open HDF5 file; use as a context manager.

    ``path`` may be a URI (``s3://``, ``gs://``, ``az://``, ``http(s)://``, ...): h5py
    then reads it through a :class:`~dataio.io.ranged.RangedFile`, fetching only the
    byte ranges the metadata and the selected chunks occupy.

    Example:
        >>> with dataio.open_hdf5("/data/arrays.h5") as f:  # doctest: +SKIP
        ...     labels = f.read(key="labels", copy=False)
    """

    def __init__(self, path: str | os.PathLike[str], *, allow_external: bool = False) -> None:
        h5py = _h5py()
        self.path = os.fspath(path)
        self.allow_external = allow_external
        self._map: mmap.mmap | None = None
        # a remote file is read through ranged requests: h5py reads Python file objects
        self._ranged: RangedFile | None = None
        if is_local(self.path):
            self._local: str | None = local_path(self.path)
            if not os.path.exists(self._local):
                raise NotFoundError(f"no such HDF5 file {self.path!r}; check the path")
            source: Any = self._local
        else:
            self._local = None
            source = self._ranged = RangedFile(self.path)  # NotFoundError names the URI
        try:
            self._file = h5py.File(source, "r")
        except (OSError, ValueError, RuntimeError) as exc:
            if self._ranged is not None:
                self._ranged.close()
                self._transport_failure(exc)
            if isinstance(exc, DataioError):
                raise
            raise FormatError(f"{self.path} is not a readable HDF5 file: {exc}") from None

    def _transport_failure(self, exc: BaseException) -> None:
        """Re-raise the error of a ranged read that failed inside h5py (which turns it
        into a plain ``OSError``): a dead server is a ``TransportError``, not damage."""
        failed = self._ranged.take_error() if self._ranged is not None else None
        if failed is not None:
            raise failed from exc

    def _raw(self) -> Any:
        """A new binary file over the same bytes, for the checks that read them directly."""
        if self._local is not None:
            return open(self._local, "rb")
        if self._ranged is not None:  # the same version of the object as the first file
            return RangedFile(self.path, size=self._ranged.size, pin=self._ranged.pin)
        return RangedFile(self.path)

    def keys(self) -> list[str]:
        """Every dataset's path in the file (groups walked recursively), sorted."""
        h5py = _h5py()
        found: list[str] = []

        def visit(name: str | bytes, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset):  # damaged names arrive as bytes
                found.append(name if isinstance(name, str) else os.fsdecode(name))

        try:
            self._file.visititems(visit)
        except (RuntimeError, KeyError, OSError, ValueError, TypeError) as exc:
            self._transport_failure(exc)
            raise FormatError(
                f"cannot list the datasets of {self.path!r}: {exc}; the file may be corrupt"
            ) from None
        return sorted(found)

    def _dataset(self, key: str) -> Any:
        h5py = _h5py()
        if not self._file.id.valid:
            raise DataioError(f"{self.path} is closed; open it again to read")
        self._check_links(key)
        try:
            found = self._file.get(key)
        except (KeyError, ValueError, TypeError, RuntimeError, OSError) as exc:
            self._transport_failure(exc)
            found = None
        if not isinstance(found, h5py.Dataset):
            what = "a group" if isinstance(found, h5py.Group) else "not in the file"
            raise FieldError(f"{self.path}: {key!r} is {what}; datasets: {self.keys()[:20]}")
        try:
            found.shape, found.dtype  # noqa: B018 - a damaged datatype fails here
        except (TypeError, ValueError, OSError, RuntimeError) as exc:
            self._transport_failure(exc)
            raise FormatError(
                f"{self.path}: dataset {key!r} has an unreadable shape or type: {exc}"
            ) from None
        self._check_storage(key, found)
        return found

    def _refuse(self, key: str, what: str) -> PermissionDeniedError:
        return PermissionDeniedError(
            f"{self.path!r}: dataset {key!r} {what}, outside this file; dataio does not read "
            "other files a dataset names unless asked: pass allow_external=True if the "
            "file is trusted"
        )

    def _check_links(self, key: str) -> None:
        """Refuse external links on ``key``'s path: they open files the caller did not name."""
        if self.allow_external:
            return
        h5py = _h5py()
        group, parts = self._file, [p for p in key.split("/") if p]
        for i, part in enumerate(parts):
            try:
                link = group.get(part, getlink=True)
            except (KeyError, ValueError, TypeError, RuntimeError, OSError):
                return  # not there: _dataset says so
            if isinstance(link, h5py.ExternalLink):
                raise self._refuse(key, f"is reached through an external link to {link.filename!r}")
            if i + 1 < len(parts):
                try:
                    group = group[part]
                except (KeyError, ValueError, TypeError, RuntimeError, OSError):
                    return
                if not isinstance(group, h5py.Group):
                    return

    def _check_storage(self, key: str, dataset: Any) -> None:
        """Refuse external raw storage and virtual sources in other files."""
        if self.allow_external:
            return
        try:
            external = dataset.external
            plist = dataset.id.get_create_plist()
            virtual = dataset.is_virtual
            sources = (
                [plist.get_virtual_filename(i) for i in range(plist.get_virtual_count())]
                if virtual
                else []
            )
        except (RuntimeError, ValueError, OSError) as exc:
            raise FormatError(f"cannot read the layout of {self.path}:{key}: {exc}") from None
        if external:
            names = sorted({os.fsdecode(entry[0]) for entry in external})
            raise self._refuse(key, f"stores its data in external file(s) {names}")
        others = sorted({name for name in sources if name != "."})
        if others:
            raise self._refuse(key, f"is a virtual dataset mapping file(s) {others}")

    def read(self, key: str, *, selection: Selection = None, copy: bool = True) -> np.ndarray:
        """Read dataset ``key`` (or a ``selection`` of it) as a NumPy array.

        Args:
            key: the dataset path, e.g. ``"images"`` or ``"group/labels"``.
            selection: integers, positive-step slices and one Ellipsis.
            copy: ``True`` returns an independent writable array; ``False`` a read-only
                one that may share the file mapping and stays valid after close.
        """
        dataset = self._dataset(key)
        where = f"{self.path}:{key}"
        index = normalize_selection(selection, dataset.shape, source=where)
        if not copy:
            mapped = self._mapped_view(dataset)
            if mapped is not None:  # a view of the file: nothing allocated
                view = mapped[(*index, Ellipsis)]  # the Ellipsis keeps 0-d results arrays
                if not view.dtype.isnative:
                    _check_size(dataset, index, where)
                    view = view.astype(view.dtype.newbyteorder("="))
                view.flags.writeable = False
                return view
        # h5py allocates the whole selection (an unwritten dataset costs nothing on
        # disk) and follows vlen heap references: check both first
        _check_size(dataset, index, where)
        try:
            _check_vlen(self._raw, dataset, where)
        except (OSError, ValueError, RuntimeError) as exc:
            if isinstance(exc, DataioError):
                raise
            self._transport_failure(exc)
            raise FormatError(f"cannot read {where}: {exc}; the file may be corrupt") from None
        try:
            array = np.asarray(dataset[index] if index else dataset[()])
        except (OSError, ValueError, TypeError, RuntimeError, KeyError) as exc:
            self._transport_failure(exc)
            raise FormatError(f"cannot read {where}: {exc}; the file may be corrupt") from None
        if array.dtype.kind not in "OV" and not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        if not copy:
            array.flags.writeable = False
        return array

    def _mapped_view(self, dataset: Any) -> np.ndarray | None:
        """The whole dataset as a view of the file mapping, when its bytes lie there as is."""
        h5py = _h5py()
        dtype = dataset.dtype
        if (
            dtype.kind not in "biufc"
            or dtype.fields is not None
            or dataset.chunks is not None
            or dataset.external
            or dataset.is_virtual
            or dataset.id.get_create_plist().get_layout() != h5py.h5d.CONTIGUOUS
        ):
            return None
        offset = dataset.id.get_offset()
        nbytes = int(np.prod(dataset.shape)) * dtype.itemsize
        if offset is None or nbytes == 0 or self._local is None:
            # never written (fill value only) or empty: h5py synthesizes it; a remote
            # file has no mapping: h5py reads the dataset's ranges
            return None
        if self._map is None:
            with open(self._local, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if offset + nbytes > len(self._map):
            raise FormatError(
                f"{self.path}: dataset {dataset.name!r} runs past the end of the file"
            )
        return np.ndarray(dataset.shape, dtype=dtype, buffer=self._map, offset=offset)

    def close(self) -> None:
        """Close the file; arrays read with ``copy=False`` stay valid."""
        self._file.close()
        if self._ranged is not None:
            self._ranged.close()
        # Never mmap.close(): arrays view the mapping without pinning it, so closing
        # would unmap live memory. Dropping the reference unmaps once they are gone.
        self._map = None

    def __repr__(self) -> str:
        return f"<Hdf5File {self.path!r}>"


def _vlen_base(dataset: Any) -> int | None:
    """The base item size of a variable-length dataset's elements, or None if fixed."""
    h5py = _h5py()
    string = h5py.check_string_dtype(dataset.dtype)
    if string is not None:
        return 1 if string.length is None else None
    base = h5py.check_vlen_dtype(dataset.dtype)
    return None if base is None else np.dtype(base).itemsize


def _check_vlen(open_raw: Callable[[], Any], dataset: Any, where: str) -> None:
    """Check a contiguous variable-length dataset's heap references before libhdf5 follows
    them: a damaged length or global heap header makes its read spin for minutes."""
    base = _vlen_base(dataset)
    if base is None or dataset.chunks is not None:
        return  # fixed-size, or chunked (its references are inside filtered chunks)
    offset = dataset.id.get_offset()
    if offset is None:
        return
    addr_size, size_size = dataset.file.id.get_create_plist().get_sizes()
    if (addr_size, size_size) != (8, 8):
        return
    count = int(np.prod(dataset.shape))
    with open_raw() as f:
        file_size = f.seek(0, os.SEEK_END)
        if offset + 16 * count > file_size:
            raise FormatError(f"{where}: dataset runs past the end of the file")
        f.seek(offset)
        refs = np.frombuffer(f.read(16 * count), dtype=[("n", "<u4"), ("a", "<u8"), ("i", "<u4")])
        total = int(refs["n"].astype(np.int64).sum()) * base
        limits.check("max_decoded_bytes", total, what=f"HDF5 dataset {where!r}")
        heaps: dict[int, dict[int, int]] = {}
        for length, address, index in refs[refs["n"] > 0].tolist():
            if address not in heaps:
                heaps[address] = _global_heap(f, address, file_size, where)
            if heaps[address].get(index) != length * base:
                raise FormatError(
                    f"{where}: element of {length} items points at global heap object "
                    f"{index} of collection {address}, which does not hold them; "
                    "the file is damaged"
                )


def _global_heap(f: Any, address: int, file_size: int, where: str) -> dict[int, int]:
    """Object sizes by index of the global heap collection at ``address``."""
    header = b""
    if 0 <= address <= file_size - 16:
        f.seek(address)
        header = f.read(16)
    size = int.from_bytes(header[8:16], "little") if len(header) == 16 else 0
    if header[:4] != b"GCOL" or size < 16 or address + size > file_size:
        raise FormatError(f"{where}: damaged global heap collection at {address}")
    f.seek(address)
    data = f.read(size)
    objects: dict[int, int] = {}
    pos = 16
    while pos + 16 <= size:
        index = int.from_bytes(data[pos : pos + 2], "little")
        length = int.from_bytes(data[pos + 8 : pos + 16], "little")
        if index == 0:
            break  # free space fills the rest
        if pos + 16 + length > size:
            raise FormatError(f"{where}: global heap object {index} at {address} overflows")
        objects[index] = length
        pos += 16 + (length + 7) // 8 * 8
    return objects


def _check_size(dataset: Any, index: tuple[Any, ...], where: str) -> None:
    """Refuse a selection whose declared size is over ``max_decoded_bytes`` before reading:
    a 2 KB file can declare an unwritten 8 GiB dataset that h5py would fill in memory."""
    count = 1
    for item, size in zip(index, dataset.shape, strict=False):
        if isinstance(item, slice):
            count *= len(range(*item.indices(size)))
    itemsize = dataset.dtype.itemsize if dataset.dtype.kind != "O" else 16
    limits.check("max_decoded_bytes", count * itemsize, what=f"HDF5 dataset {where!r}")


def open_hdf5(path: str | os.PathLike[str], *, allow_external: bool = False) -> Hdf5File:
    """Open an HDF5 file for reading datasets.

    Datasets stored in other files (external storage, virtual datasets mapping other
    files, external links) raise :class:`PermissionDeniedError` unless
    ``allow_external=True``: a file could otherwise make dataio read any file.

    Example:
        >>> with dataio.open_hdf5("/data/arrays.h5") as f:  # doctest: +SKIP
        ...     view = f.read(key="labels", copy=False)
    """
    return Hdf5File(path, allow_external=allow_external)


def read_hdf5(
    path: str | os.PathLike[str],
    *,
    key: str,
    selection: Selection = None,
    copy: bool = True,
    allow_external: bool = False,
) -> np.ndarray:
    """Read one dataset, or a selection of it, from an HDF5 file.

    ``allow_external=True`` lets datasets read other files (see :func:`open_hdf5`).

    Example:
        >>> window = dataio.read_hdf5(  # doctest: +SKIP
        ...     "/data/arrays.h5", key="images", selection=(slice(10, 20), ...)
        ... )
    """
    with open_hdf5(path, allow_external=allow_external) as f:
        return f.read(key, selection=selection, copy=copy)


def scan_hdf5(
    source: Source,
    *,
    keys: Iterable[str] | None = None,
    copy: bool = True,
    allow_external: bool = False,
) -> LazyFrame:
    """A lazy frame of HDF5 datasets: records ``{"key", "path", "array"}``, one per dataset.

    ``allow_external=True`` lets datasets read other files (see :func:`open_hdf5`).

    ``keys`` picks datasets (default: every dataset of each file, sorted). ``source`` is
    a path, a glob, a directory (its ``.h5``/``.hdf5`` files) or a list of them. Nothing
    is opened until the frame runs or is iterated; iterated, ``"array"`` is a NumPy
    array, and run as a frame a :func:`~dataio.formats._scan.tensor_type` struct.

    Example:
        >>> for record in dataio.scan_hdf5("/data/*.h5", keys=["images"]):  # doctest: +SKIP
        ...     print(record["path"], record["array"].shape)
    """
    import pyarrow as pa

    wanted = None if keys is None else list(keys)

    def read(path: str) -> Iterator[dict[str, Any]]:
        with open_hdf5(path, allow_external=allow_external) as f:
            for key in f.keys() if wanted is None else wanted:
                yield {"key": key, "path": path, "array": f.read(key, copy=copy)}

    schema = pa.schema([("key", pa.string()), ("path", pa.string()), ("array", tensor_type())])

    def to_arrow(records: list[dict[str, Any]]) -> pa.RecordBatch:
        rows = [
            {**r, "array": tensor_values(r["array"], f"scan_hdf5 {r['path']!r} {r['key']!r}")}
            for r in records
        ]
        return pa.RecordBatch.from_pylist(rows, schema=schema)

    options = {"keys": wanted, "copy": copy, "allow_external": allow_external}
    return file_records(
        "scan_hdf5",
        source,
        extensions=(".h5", ".hdf5", ".he5", ".hdf"),
        options=options,
        read=read,
        to_arrow=to_arrow,
        fields=(),
        schema=schema,
    )
