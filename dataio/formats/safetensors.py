"""safetensors checkpoints: memory-mapped reads, sharded Hugging Face layout, strict headers.

A read maps each file once and hands out views of the mapping, so loading a checkpoint
costs its header parse plus one page fault per page actually touched:

* NumPy arrays view a read-only shared mapping (``mmap.ACCESS_READ``) and are read-only;
* torch tensors view a private copy-on-write mapping (``mmap.ACCESS_COPY``): they are
  writable, and a write copies only the page it touches, never reaching the file.

Views keep their mapping alive, so arrays stay valid after the file is closed. A file
truncated under a live view kills the process with ``SIGBUS`` when a lost page is
touched; ``copy=True`` reads into memory instead (decision 012).
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import numpy as np

from dataio._closing import Closing
from dataio.dlpack import TensorView
from dataio.exceptions import (
    DataioError,
    FieldError,
    FormatError,
    NotFoundError,
    PlanError,
)
from dataio.formats._devices import cuda_target, gds_available, gds_info, to_device
from dataio.formats._safetensors_write import INDEX_NAME, parse_size, write_safetensors
from dataio.io import read_bytes
from dataio.io.local import open_file
from dataio.io.ranged import RangedFile, is_local, local_path
from dataio.io.resolve import glob_in
from dataio.io.verbs import exists, glob
from dataio.plan.ops import choice
from dataio.udfs.tensor import (
    SafetensorsHeader,
    TensorEntry,
    entry_array,
    parse_safetensors_header,
    safetensors_header_length,
)

__all__ = [
    "INDEX_NAME",
    "SafetensorsFile",
    "gds_available",
    "gds_info",
    "open_safetensors",
    "parse_size",
    "read_safetensors",
    "write_safetensors",
]

Framework = Literal["numpy", "torch", "dlpack"]
FRAMEWORKS = ("numpy", "torch", "dlpack")


# -- reading ----------------------------------------------------------------------------


class _MappedFile:
    """One safetensors file: its checked header and, on first use, its mappings."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file = open_file(path, "open safetensors file")  # owned until close()
        try:
            self.size = os.fstat(self._file.fileno()).st_size
            fd = self._file.fileno()
            length = safetensors_header_length(os.pread(fd, 8, 0), self.size, source=path)
            raw = os.pread(fd, length, 8)
            if len(raw) != length:
                raise FormatError(f"{path} shrank while its header was read; retry")
            self.header: SafetensorsHeader = parse_safetensors_header(raw, self.size, source=path)
        except BaseException:
            self._file.close()
            raise
        self._maps: dict[int, mmap.mmap] = {}

    def mapping(self, access: int) -> mmap.mmap:
        found = self._maps.get(access)
        if found is None:
            if self._file.closed:
                raise DataioError(f"{self.path} is closed; open it again to read")
            try:
                found = mmap.mmap(self._file.fileno(), self.size, access=access)
            except (OSError, ValueError) as exc:  # the file shrank since its header was read
                raise FormatError(f"cannot map {self.path}: {exc}; was it truncated?") from exc
            self._maps[access] = found
        return found

    def read_bytes(self, entry: TensorEntry) -> bytearray:
        """A tensor's bytes, read (not mapped) into a new writable buffer."""
        if self._file.closed:
            raise DataioError(f"{self.path} is closed; open it again to read")
        buffer = bytearray(entry.nbytes)
        view, done, fd = memoryview(buffer), 0, self._file.fileno()
        while done < entry.nbytes:  # Linux reads at most ~2 GiB per call
            n = os.preadv(fd, [view[done:]], entry.start + done)
            if n == 0:
                raise FormatError(
                    f"{self.path}: tensor {entry.name!r} ends at byte {entry.end} but the file "
                    f"now ends at {entry.start + done}; it was truncated while being read"
                )
            done += n
        return buffer

    def array(
        self, entry: TensorEntry, copy: bool = False, access: int = mmap.ACCESS_READ
    ) -> np.ndarray:
        if entry.nbytes == 0:
            empty = entry_array(b"", _at_zero(entry), source=self.path)
            return empty
        if copy:
            return entry_array(self.read_bytes(entry), _at_zero(entry), source=self.path)
        return entry_array(self.mapping(access), entry, source=self.path)

    def tensor(self, entry: TensorEntry, copy: bool = False) -> Any:
        if copy and entry.nbytes:
            data = self.read_bytes(entry)
            return _torch_view(lambda: data, _at_zero(entry), self.path)
        return _torch_view(lambda: self.mapping(mmap.ACCESS_COPY), entry, self.path)

    def close(self) -> None:
        self._file.close()
        # Never mmap.close(): NumPy arrays view a mapping without pinning it, so closing
        # would unmap live memory. Dropping the reference unmaps once they are gone.
        self._maps.clear()


class _RemoteFile:
    """One remote safetensors file: its header read by ranges, tensors fetched on demand.

    Only the header and the tensors asked for cross the network: a few requested
    tensors are fetched as their own byte ranges (neighbours merged into one request);
    when they add up to most of the file, the whole object is fetched once (in
    parallel ranges, through the local cache when ``DATAIO_CACHE_DIR`` is set).
    """

    def __init__(self, uri: str) -> None:
        self.path = uri
        self._file = RangedFile(uri, read_ahead=_HEADER_READ)
        self.size = self._file.size
        try:
            length = safetensors_header_length(self._file.read(8), self.size, source=uri)
            raw = self._file.read(length)
            if len(raw) != length:
                raise FormatError(f"{uri} shrank while its header was read; retry")
            self.header: SafetensorsHeader = parse_safetensors_header(raw, self.size, source=uri)
        except BaseException:
            self._file.close()
            raise

    def fetch(self, entries: list[TensorEntry]) -> dict[str, memoryview]:
        """The bytes of ``entries``, each a view of what was fetched, by tensor name."""
        if self._file.closed:
            raise DataioError(f"{self.path} is closed; open it again to read")
        wanted = sorted((e for e in entries if e.nbytes), key=lambda e: e.start)
        if not wanted:
            return {}
        if sum(e.nbytes for e in wanted) >= self.size * _WHOLE_FRACTION:
            whole = memoryview(self._file.read_whole()).cast("B")  # the header's version
            return {e.name: whole[e.start : e.end] for e in wanted}
        spans: list[list[Any]] = []  # [start, end, entries]
        for e in wanted:
            if spans and e.start - spans[-1][1] <= _MERGE_GAP:
                spans[-1][1] = max(spans[-1][1], e.end)
                spans[-1][2].append(e)
            else:
                spans.append([e.start, e.end, [e]])

        def get(span: list[Any]) -> dict[str, memoryview]:
            start, end, members = span
            data = memoryview(self._file.pread(start, end - start))
            if len(data) != end - start:
                raise FormatError(
                    f"{self.path}: tensors end at byte {end} but the object now ends at "
                    f"{start + len(data)}; it was truncated while being read"
                )
            return {e.name: data[e.start - start : e.end - start] for e in members}

        out: dict[str, memoryview] = {}
        if len(spans) == 1:
            return get(spans[0])
        with ThreadPoolExecutor(min(8, len(spans))) as pool:
            for part in pool.map(get, spans):
                out.update(part)
        return out

    def array(self, entry: TensorEntry, data: memoryview | None, copy: bool = False) -> np.ndarray:
        if entry.nbytes == 0 or data is None:
            return entry_array(b"", _at_zero(entry), source=self.path)
        return entry_array(bytearray(data) if copy else data, _at_zero(entry), source=self.path)

    def tensor(self, entry: TensorEntry, data: memoryview | None, copy: bool = False) -> Any:
        if entry.nbytes == 0 or data is None:
            return _torch_view(lambda: b"", entry, self.path)
        writable = bytearray(data)  # torch tensors are writable: never a view of bytes
        return _torch_view(lambda: writable, _at_zero(entry), self.path)

    def close(self) -> None:
        self._file.close()


# The first request of a remote file: the 8-byte length and, usually, the whole header.
_HEADER_READ = 64 << 10
# Tensors closer than this are fetched in one range (one round trip beats two).
_MERGE_GAP = 1 << 20
# Asked-for tensors covering this much of a file fetch it whole (parallel, cached).
_WHOLE_FRACTION = 0.5


def _at_zero(entry: TensorEntry) -> TensorEntry:
    """The entry of a buffer holding only this tensor's bytes."""
    return TensorEntry(entry.name, entry.dtype, entry.shape, 0, entry.nbytes)


def _torch_dtype(entry: TensorEntry, source: str) -> Any:
    import torch

    name = entry.dtype.torch
    dtype = getattr(torch, name, None) if name else None
    if dtype is None:
        raise FormatError(
            f"{source}: tensor {entry.name!r} is {entry.dtype.name}, which this torch "
            f"({torch.__version__}) has no dtype for"
            + ("; upgrade torch" if name else "; no framework reads it yet")
        )
    return dtype


def _torch_shape(entry: TensorEntry, source: str) -> tuple[int, ...]:
    if entry.dtype.bits >= 8:
        return entry.shape
    # Sub-byte dtypes are packed pairs in torch: the last axis halves.
    if not entry.shape or entry.shape[-1] % 2:
        raise FormatError(
            f"{source}: tensor {entry.name!r} is {entry.dtype.name} with shape "
            f"{list(entry.shape)}; torch needs an even last axis to pack it in pairs"
        )
    return (*entry.shape[:-1], entry.shape[-1] // 2)


def _torch_view(buffer: Any, entry: TensorEntry, source: str) -> Any:
    """A torch tensor over ``buffer()`` (a callable, so empty tensors map nothing)."""
    dtype, shape = _torch_dtype(entry, source), _torch_shape(entry, source)
    try:
        return _torch_over(buffer, entry, dtype, shape)
    except (RuntimeError, TypeError, ValueError, OverflowError) as exc:
        # Headers are checked first; torch still refuses e.g. an empty tensor whose other
        # sizes multiply past 2**63.
        raise FormatError(
            f"{source}: tensor {entry.name!r} of shape {list(entry.shape)} cannot be made "
            f"a torch tensor: {exc}"
        ) from exc


def _torch_over(buffer: Any, entry: TensorEntry, dtype: Any, shape: tuple[int, ...]) -> Any:
    import torch

    if entry.nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    itemsize = torch.empty((), dtype=dtype).element_size()
    count = entry.nbytes // itemsize
    if entry.start % itemsize == 0:
        flat = torch.frombuffer(buffer(), dtype=dtype, count=count, offset=entry.start)
    else:  # a misaligned tensor (not written by safetensors writers): copy to align it
        raw = torch.frombuffer(buffer(), dtype=torch.uint8, count=entry.nbytes, offset=entry.start)
        flat = raw.clone().view(dtype)
    return flat.reshape(shape)


class SafetensorsFile(Closing):
    """An open safetensors file or checkpoint directory; use as a context manager.

    A directory is read through its ``model.safetensors.index.json`` (Hugging Face's
    sharded layout) or, without one, as the union of its ``*.safetensors`` files.
    Shards open on first use. Arrays read from it stay valid after :meth:`close`.

    Example:
        >>> with dataio.open_safetensors("model.safetensors") as st:  # doctest: +SKIP
        ...     w = st.read(key="layer.weight", framework="torch")
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.index: dict[str, Any] | None = None
        self._files: dict[str, _MappedFile | _RemoteFile] = {}
        self._closed = False
        self._remote = not is_local(self.path)
        try:
            if self._remote:
                self._where = self._remote_layout()
            elif os.path.isdir(local_path(self.path)):
                self.path = local_path(self.path)
                self._where = self._directory_layout()
            else:
                single = self._open(self.path)
                self._where = dict.fromkeys(single.header.tensors, self.path)
        except BaseException:
            self.close()
            raise

    def _remote_layout(self) -> dict[str, str]:
        """A remote file, or a prefix holding an index or ``*.safetensors`` objects."""
        if self.path.endswith(".safetensors"):
            return dict.fromkeys(self._open(self.path).header.tensors, self.path)
        base = self.path.rstrip("/")
        index_uri = f"{base}/{INDEX_NAME}"
        if exists(index_uri):
            self.index = _read_index(index_uri)
            return {name: f"{base}/{file}" for name, file in self.index["weight_map"].items()}
        try:
            found = glob(base + "/*.safetensors")
        except DataioError:  # a server that cannot list (plain HTTP): maybe one object
            if not exists(self.path):
                raise
            found = []
        if not found and exists(self.path):  # one object named without the extension
            return dict.fromkeys(self._open(self.path).header.tensors, self.path)
        if not found:
            raise NotFoundError(
                f"no object {self.path!r}, and no {INDEX_NAME} or *.safetensors objects "
                "under it; check the URI"
            )
        return self._union(found)

    def _directory_layout(self) -> dict[str, str]:
        index_path = os.path.join(self.path, INDEX_NAME)
        if os.path.exists(index_path):
            self.index = _read_index(index_path)
            return {
                name: os.path.join(self.path, file)
                for name, file in self.index["weight_map"].items()
            }
        found = glob_in(self.path, "*.safetensors")
        if not found:
            raise NotFoundError(
                f"{self.path!r} holds no {INDEX_NAME} and no *.safetensors files; "
                "point at a checkpoint directory or file"
            )
        return self._union(found)

    def _union(self, found: list[str]) -> dict[str, str]:
        """Where each tensor is among ``found`` files, which must not repeat one."""
        where: dict[str, str] = {}
        for file in found:
            for name in self._open(file).header.tensors:
                if name in where:
                    raise FormatError(
                        f"tensor {name!r} is in both {where[name]} and {file}; without an "
                        f"index the files of {self.path!r} must not repeat a tensor"
                    )
                where[name] = file
        return where

    def _open(self, file: str) -> _MappedFile | _RemoteFile:
        if self._closed:
            raise DataioError(f"{self.path!r} is closed; open it again to read")
        opened = self._files.get(file)
        if opened is None:
            opened = _RemoteFile(file) if self._remote else _MappedFile(local_path(file))
            self._files[file] = opened
        return opened

    def _entry(self, name: str) -> tuple[_MappedFile | _RemoteFile, TensorEntry]:
        file = self._where.get(name)
        if file is None:
            names = list(self._where)
            shown = ", ".join(repr(k) for k in names[:10])
            more = f" and {len(names) - 10} more" if len(names) > 10 else ""
            raise FieldError(f"{self.path!r} has no tensor {name!r}; it holds {shown}{more}")
        opened = self._open(file)
        entry = opened.header.tensors.get(name)
        if entry is None:
            raise FormatError(
                f"{INDEX_NAME} of {self.path!r} puts tensor {name!r} in {file}, which does not "
                "hold it; the index is stale, re-save the checkpoint"
            )
        return opened, entry

    @property
    def metadata(self) -> dict[str, str]:
        """The ``__metadata__`` strings of the file (of the first shard, for a directory)."""
        if not self._where:
            first = next(iter(self._files.values()), None)
            return dict(first.header.metadata) if first else {}
        return dict(self._open(next(iter(self._where.values()))).header.metadata)

    def keys(self) -> list[str]:
        """Tensor names, in file order (index order for a sharded checkpoint)."""
        return list(self._where)

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def __len__(self) -> int:
        return len(self._where)

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def read(
        self,
        key: str | None = None,
        *,
        keys: Iterable[str] | None = None,
        framework: Framework = "numpy",
        device: str | None = None,
        copy: bool = False,
    ) -> Any:
        """Read one tensor (``key=``), several (``keys=``) or, with neither, all of them.

        Args:
            key: one tensor name; the result is that array.
            keys: tensor names; the result is a dict in the order given.
            framework: ``"numpy"`` (read-only views), ``"torch"`` (writable tensors over
                a copy-on-write mapping) or ``"dlpack"`` (:class:`~dataio.TensorView`
                objects over a copy-on-write mapping, for any ``from_dlpack``).
            device: ``None`` / ``"cpu"``, or ``"cuda:N"`` (torch only) to read each
                tensor into that GPU (GPUDirect Storage where the host has it; see
                :func:`read_safetensors`).
            copy: read into writable memory instead of viewing a file mapping: slower to
                load, but safe if the file is truncated or rewritten while in use.

        Raises:
            FieldError: a name is not in the checkpoint.
            DeviceError: the device is not available.
        """
        choice(framework, FRAMEWORKS, "framework")
        if key is not None and keys is not None:
            raise PlanError("pass key= for one tensor or keys= for several, not both")
        if isinstance(keys, str):
            raise PlanError(f"keys= takes a list of names, got the string {keys!r}; use key=")
        names = [key] if key is not None else list(self._where if keys is None else keys)
        target = cuda_target(device, framework)
        found = [(name, *self._entry(name)) for name in names]
        if target is not None and not any(isinstance(f[1], _RemoteFile) for f in found):
            on_gpu = _read_to_gpu(found, target)  # local files: cuFile / kvikio / pinned
            return on_gpu[key] if key is not None else on_gpu
        fetched = self._fetch_remote(found)
        out: dict[str, Any] = {}
        for name, opened, entry in found:
            if isinstance(opened, _RemoteFile):
                data = fetched.get(name)
                if framework == "torch":
                    out[name] = opened.tensor(entry, data, copy)
                else:
                    out[name] = opened.array(entry, data, copy)
            elif framework == "numpy":
                out[name] = opened.array(entry, copy)
            elif framework == "dlpack":  # consumers may write: a copy-on-write mapping
                out[name] = opened.array(entry, copy, mmap.ACCESS_COPY)
            else:
                out[name] = opened.tensor(entry, copy)
        if framework == "dlpack":
            out = {name: TensorView(array) for name, array in out.items()}
        if target is not None:
            out = to_device(out, target)
        return out[key] if key is not None else out

    @staticmethod
    def _fetch_remote(found: list[tuple[str, Any, TensorEntry]]) -> dict[str, memoryview]:
        """The bytes of the remote tensors in ``found``: one batch of ranges per file."""
        by_file: dict[int, tuple[_RemoteFile, list[TensorEntry]]] = {}
        for _, opened, entry in found:
            if isinstance(opened, _RemoteFile):
                by_file.setdefault(id(opened), (opened, []))[1].append(entry)
        fetched: dict[str, memoryview] = {}
        for opened, entries in by_file.values():
            fetched.update(opened.fetch(entries))
        return fetched

    def close(self) -> None:
        """Close the files; arrays already read stay valid."""
        self._closed = True
        for opened in self._files.values():
            opened.close()
        self._files.clear()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._where)} tensors"
        return f"<SafetensorsFile {self.path!r} ({state})>"


def _read_to_gpu(found: list[tuple[str, Any, TensorEntry]], target: Any) -> dict[str, Any]:
    """Local tensors read straight into ``target`` memory (see :mod:`dataio.formats.gds`)."""
    from dataio.formats.gds import read_to_device

    # a view of the mapping gives shape and dtype (BF16, F8 included) without a page read
    items = [
        (name, opened.path, opened.tensor(entry), entry.start) for name, opened, entry in found
    ]
    return read_to_device(items, target)


def _read_index(path: str) -> dict[str, Any]:
    try:
        index = json.loads(read_bytes(path))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise FormatError(f"{path} is not valid JSON ({exc}); re-save the checkpoint") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise FormatError(f"{path} needs a 'weight_map' of tensor name -> shard file name")
    for file in set(weight_map.values()):
        if not file or os.path.basename(file) != file or file in (".", ".."):
            raise FormatError(
                f"{path} names shard {file!r}; shards must be plain file names in the "
                "checkpoint directory"
            )
    return index


def open_safetensors(path: str | os.PathLike[str]) -> SafetensorsFile:
    """Open a safetensors file or checkpoint directory, reading only headers.

    Example:
        >>> with dataio.open_safetensors("/ckpt/model.safetensors") as st:  # doctest: +SKIP
        ...     subset = st.read(keys=["layer.weight", "layer.bias"], framework="torch")
    """
    return SafetensorsFile(path)


def read_safetensors(
    path_or_dir: str | os.PathLike[str],
    *,
    keys: Iterable[str] | None = None,
    framework: Framework = "numpy",
    device: str | None = None,
    copy: bool = False,
) -> dict[str, Any]:
    """Read a safetensors file or (sharded) checkpoint directory into a dict of tensors.

    NumPy results are read-only views of a shared file mapping; torch results are
    writable views of a private copy-on-write mapping. Nothing is copied until a page is
    touched (or, for torch, written). BF16 and F8 become ``ml_dtypes`` arrays in NumPy.
    A mapped file truncated while its tensors live kills the process (``SIGBUS``) when a
    lost page is touched; ``copy=True`` reads every tensor into writable memory instead.

    ``device="cuda:N"`` reads each tensor of a local file straight into GPU memory:
    through cuFile with GPUDirect Storage where the host has it, else kvikio's POSIX
    compatibility mode, else dataio's pinned bounce buffers (:func:`gds_info` says which,
    and why; ``kvikio`` comes with ``pip install 'dataio[gds]'``). Remote tensors are
    fetched, then copied through pinned buffers.

    ``path_or_dir`` may be a URI (``s3://``, ``gs://``, ``az://``, ``hf://``,
    ``http(s)://``, ``file://``): the header is fetched by a ranged read, then only the
    tensors asked for (the whole object when they cover most of it). Remote results are
    in memory: NumPy arrays read-only unless ``copy=True``, torch tensors writable.

    Args:
        path_or_dir: a ``.safetensors`` file or a directory (with or without
            ``model.safetensors.index.json``), local or a URI (a remote "directory"
            is a prefix).
        keys: the tensors to read (default: all).
        framework: ``"numpy"``, ``"torch"`` or ``"dlpack"``: :class:`~dataio.TensorView`
            objects any ``from_dlpack`` (torch, JAX, CuPy, NumPy) turns into its tensor
            without a copy, BF16 and F8 included; local files are viewed through a private
            copy-on-write mapping, so a consumer writing to its tensor never reaches the
            file (remote tensors are in memory, exported read-only).
        device: ``None`` / ``"cpu"`` or ``"cuda:N"`` (torch only).
        copy: read into memory rather than map the file (see above).

    Raises:
        FormatError: a header or index is malformed.
        NotFoundError: the path or object does not exist (the message names it).
        DeviceError: ``device`` names a GPU this host lacks.

    Example:
        >>> sd = dataio.read_safetensors("/ckpt/", framework="torch")  # doctest: +SKIP
    """
    with open_safetensors(path_or_dir) as st:
        result: dict[str, Any] = st.read(keys=keys, framework=framework, device=device, copy=copy)
        return result
