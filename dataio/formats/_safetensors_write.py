"""Writing safetensors files and Hugging Face style sharded checkpoints."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from dataio.exceptions import PlanError
from dataio.udfs.tensor import SAFETENSORS_DTYPES

__all__ = ["INDEX_NAME", "SINGLE_NAME", "parse_size", "write_safetensors"]

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
_SHARD_RE = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")
_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(value: int | str) -> int:
    """Parse a shard size: bytes as an int, or text like ``"5GB"`` (10**9) or ``"2GiB"``.

    Example:
        >>> parse_size("500MB")
        500000000
    """
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and (match := _SIZE_RE.fullmatch(value)):
        number = int(float(match.group(1)) * _UNITS[(match.group(2) or "").lower()])
    else:
        raise PlanError(
            f"max_shard_size must be bytes as an int or text like '5GB' or '2GiB', got {value!r}"
        )
    if number <= 0:
        raise PlanError(f"max_shard_size must be positive, got {value!r}")
    return number


class _Tensor:
    """A tensor ready to write: its safetensors dtype, shape and a byte view."""

    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        if isinstance(value, np.ndarray | np.generic):
            self.dtype, self.shape, self.data = _numpy_bytes(name, np.asarray(value))
        elif type(value).__module__.split(".")[0] == "torch" and hasattr(value, "untyped_storage"):
            self.dtype, self.shape, self.data = _torch_bytes(name, value)
        else:
            raise PlanError(
                f"state_dict[{name!r}] is {type(value).__name__}; "
                "pass NumPy arrays or torch tensors"
            )
        self.nbytes = self.data.nbytes
        self.align = max(1, SAFETENSORS_DTYPES[self.dtype].bits // 8)


_NUMPY_NAMES = {
    d.numpy.split(":")[-1].lstrip("<|"): d.name for d in SAFETENSORS_DTYPES.values() if d.numpy
}


def _numpy_bytes(name: str, array: np.ndarray) -> tuple[str, tuple[int, ...], memoryview]:
    dtype = array.dtype
    key = dtype.name if dtype.name in _NUMPY_NAMES else dtype.newbyteorder("<").str.lstrip("<|")
    st_name = _NUMPY_NAMES.get(key)
    if st_name is None:
        raise PlanError(
            f"state_dict[{name!r}] has dtype {dtype}, which safetensors cannot store "
            "(complex128 included: cast to complex64 or split real and imaginary parts)"
        )
    shape = array.shape
    if dtype.byteorder == ">" or (dtype.byteorder == "=" and not np.little_endian):
        array = array.astype(dtype.newbyteorder("<"))
    array = np.ascontiguousarray(array)
    return st_name, shape, memoryview(array.reshape(-1).view(np.uint8))  # type: ignore[arg-type]


def _torch_bytes(name: str, tensor: Any) -> tuple[str, tuple[int, ...], memoryview]:
    import torch

    by_torch = {d.torch: d.name for d in SAFETENSORS_DTYPES.values() if d.torch}
    torch_name = str(tensor.dtype).removeprefix("torch.")
    st_name = by_torch.get(torch_name)
    if st_name is None:
        raise PlanError(
            f"state_dict[{name!r}] has dtype {tensor.dtype}, which safetensors cannot store"
        )
    if tensor.layout != torch.strided:
        raise PlanError(f"state_dict[{name!r}] is a {tensor.layout} tensor; call .to_dense() first")
    tensor = tensor.detach().cpu().contiguous()
    shape = tuple(tensor.shape)
    if SAFETENSORS_DTYPES[st_name].bits < 8:
        shape = (*shape[:-1], shape[-1] * 2)  # packed pairs: the header counts elements
    raw = tensor.reshape(-1).view(torch.uint8).numpy()
    return st_name, shape, memoryview(raw)


def _header(tensors: list[_Tensor], metadata: dict[str, str]) -> bytes:
    fields: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for t in tensors:
        fields[t.name] = {
            "dtype": t.dtype,
            "shape": list(t.shape),
            "data_offsets": [offset, offset + t.nbytes],
        }
        offset += t.nbytes
    text = json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)  # data starts 8-byte aligned, as safetensors writes it
    return len(text).to_bytes(8, "little") + text


# Files this large upload in parts, from the tensors' own memory; smaller ones in one PUT.
_MULTIPART_BYTES = 16 << 20
_PART_MIB = 16


def _ordered(tensors: list[_Tensor]) -> list[_Tensor]:
    """Largest alignment first keeps every tensor aligned to its element size."""
    return sorted(tensors, key=lambda t: (-t.align, t.name))


def _write_file(path: str, tensors: list[_Tensor], metadata: dict[str, str]) -> None:
    """Write one file atomically: a local temporary file renamed over ``path``, or one
    object put whole (object stores show an object whole or not at all)."""
    ordered = _ordered(tensors)
    if _remote(path):
        from dataio.io.verbs import write

        parts = [memoryview(_header(ordered, metadata)), *(t.data for t in ordered)]
        total = sum(p.nbytes for p in parts)
        if total >= _MULTIPART_BYTES and not path.startswith(("http://", "https://")):
            from dataio.io.handles import writer

            # the header and each tensor's bytes as they are, in a multipart upload
            # completed only when all went up: no file-size buffer is built
            with writer(path, part_size_mib=_PART_MIB) as out:
                out.write_chunks(parts)
        else:  # one PUT (HTTP stores take no multipart uploads)
            write(path, b"".join(parts))
        return
    folder = os.path.dirname(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(prefix=".tmp-", suffix=".safetensors", dir=folder)
    try:
        with os.fdopen(fd, "wb", buffering=0) as out:
            out.write(_header(ordered, metadata))
            for t in ordered:
                view = t.data
                while view.nbytes:
                    view = view[out.write(view) or 0 :]
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def _shards(tensors: list[_Tensor], limit: int) -> list[list[_Tensor]]:
    """Split in state-dict order the way ``huggingface_hub`` does.

    A tensor larger than the limit becomes a shard of its own right away; the others
    fill the current shard until the next one would overflow it.
    """
    shards: list[list[_Tensor]] = []
    current: list[_Tensor] = []
    size = 0
    for t in tensors:
        if t.nbytes > limit:
            shards.append([t])
            continue
        if current and size + t.nbytes > limit:
            shards.append(current)
            current, size = [], 0
        current.append(t)
        size += t.nbytes
    if current or not shards:
        shards.append(current)
    return shards


def write_safetensors(
    path_or_dir: str | os.PathLike[str],
    state_dict: Mapping[str, Any],
    *,
    max_shard_size: int | str = "5GB",
    metadata: Mapping[str, str] | None = None,
) -> list[str]:
    """Write NumPy arrays or torch tensors as safetensors, sharded like Hugging Face.

    A path ending in ``.safetensors`` is written as one file. Otherwise the path is a
    directory: ``model.safetensors`` when everything fits in ``max_shard_size``, else
    ``model-00001-of-0000N.safetensors`` shards plus ``model.safetensors.index.json``.
    Shard and index files of an earlier layout in that directory are removed, so the
    directory always reads back as what was written. Each file is written to a
    temporary name and renamed, so readers never see a partial file.

    ``path_or_dir`` may be an object store URI (``s3://``, ``gs://``, ``az://``,
    ``http(s)://``): each file is put as one object, whole or not at all (large ones
    as a multipart upload from the tensors' own memory), and the stale objects of an
    earlier layout are found through its index and deleted.

    Args:
        path_or_dir: a ``.safetensors`` file path or a directory.
        state_dict: tensor name -> array or tensor (any dtype safetensors stores).
        max_shard_size: bytes per shard, an int or text (``"5GB"`` = 5 * 10**9,
            ``"5GiB"`` = 5 * 2**30).
        metadata: text metadata stored in every file's ``__metadata__``.

    Returns:
        The paths written, shards first, then the index.

    Example:
        >>> dataio.write_safetensors("/ckpt/", model.state_dict())  # doctest: +SKIP
        ['/ckpt/model.safetensors']
    """
    target = os.fspath(path_or_dir)
    meta = _check_metadata(metadata)
    limit = parse_size(max_shard_size)
    if not isinstance(state_dict, Mapping):
        raise PlanError(
            f"state_dict must be a mapping of name -> tensor, got {type(state_dict).__name__}"
        )
    tensors = []
    for name, value in state_dict.items():
        if not isinstance(name, str) or not name or name == "__metadata__":
            raise PlanError(
                f"tensor names must be non-empty strings other than '__metadata__', got {name!r}"
            )
        tensors.append(_Tensor(name, value))
    remote = _remote(target)
    style = ""
    if not remote and target.startswith("file://"):
        target, style = _local(target), "file://"  # answered in the style asked
    if target.endswith(".safetensors") and (remote or not os.path.isdir(target)):
        _write_file(target, tensors, meta)
        return [style + target]
    previous: set[str] = set()
    if remote:
        target = target.rstrip("/")
        previous = _previous_layout(target)
    else:
        os.makedirs(target, exist_ok=True)
    shards = _shards(tensors, limit)
    if len(shards) == 1:
        names = [SINGLE_NAME]
    else:
        names = [
            f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)
        ]
    written = []
    for file, shard in zip(names, shards, strict=True):
        written.append(f"{target}/{file}" if remote else os.path.join(target, file))
        _write_file(written[-1], shard, meta)
    if len(shards) > 1:
        index = {
            "metadata": {"total_size": sum(t.nbytes for t in tensors)},
            "weight_map": {
                t.name: file for file, shard in zip(names, shards, strict=True) for t in shard
            },
        }
        text = json.dumps(index, indent=2, sort_keys=True) + "\n"
        if remote:
            from dataio.io.verbs import write

            written.append(f"{target}/{INDEX_NAME}")
            write(written[-1], text.encode())
        else:
            written.append(os.path.join(target, INDEX_NAME))
            _write_text(written[-1], text)
    keep = {p.rsplit("/", 1)[-1] for p in written}
    if remote:
        _remove_stale_remote(target, previous - keep)
    else:
        _remove_stale(target, keep)
    return [style + p for p in written]


def _check_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise PlanError(f"metadata must map strings to strings, got {metadata!r}")
    return dict(metadata)


def _write_text(path: str, text: str) -> None:
    fd, temp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(path))
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(temp, 0o644)
    os.replace(temp, path)


def _remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _local(path: str) -> str:
    if not path.startswith("file://"):
        return path
    from dataio.io.ranged import local_path

    return local_path(path)


def _previous_layout(prefix: str) -> set[str]:
    """The layout objects an earlier write left under ``prefix``: its single file and its
    index and the shards that index names. Found without listing (HTTP servers rarely
    list), from the index itself."""
    from dataio.exceptions import NotFoundError
    from dataio.io.verbs import read

    found = {SINGLE_NAME}
    try:
        index = json.loads(read(f"{prefix}/{INDEX_NAME}"))
    except NotFoundError:
        return found
    except ValueError:  # a damaged index: replaced, its shards unknown
        return found | {INDEX_NAME}
    found.add(INDEX_NAME)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if isinstance(weight_map, dict):
        found |= {f for f in weight_map.values() if isinstance(f, str) and _SHARD_RE.fullmatch(f)}
    return found


def _remove_stale_remote(prefix: str, stale: set[str]) -> None:
    """Delete the ``stale`` layout objects of an earlier write under ``prefix``, so the
    prefix reads back as what was written (deleting a missing object is no error)."""
    from dataio.io.verbs import delete

    for name in sorted(stale):
        delete(f"{prefix}/{name}")


def _remove_stale(folder: str, keep: set[str]) -> None:
    for entry in os.listdir(folder):
        layout = entry in (SINGLE_NAME, INDEX_NAME) or _SHARD_RE.fullmatch(entry)
        if layout and entry not in keep:
            os.unlink(os.path.join(folder, entry))
