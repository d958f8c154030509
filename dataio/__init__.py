"""dataio: load, decode, transform and batch data for machine learning, on Arrow.

Build a plan with :func:`pipeline`, :func:`slot` and :func:`batch`, bind records and
run it::

    pipe = dataio.pipeline(
        dataio.slot("image").decode_image(mode="rgb").resize_short(256)
            .center_crop(h=224, w=224).normalize("imagenet"),
        dataio.batch(64),
    )
    with pipe.bind(records).run("torch") as loader:
        for batch in loader:
            ...

Importing dataio loads neither torch, Pillow nor DataFusion; they load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dataio import batch_transforms, cond, decoders, limits, progress, testing, transforms
from dataio.batch import Batch
from dataio.dataloader import DataLoader
from dataio.dlpack import TensorView, tensor_view
from dataio.exceptions import (
    AuthenticationError,
    BatchFailedError,
    CheckpointError,
    DataioError,
    DecodeError,
    DeviceError,
    FieldError,
    FormatError,
    LimitError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
    PlanError,
    QueryError,
    ShapeMismatchError,
    TransformError,
    TransportError,
    TransportTimeoutError,
)
from dataio.formats.gds import gds_open, gds_read_into_tensor, gds_register_buffer
from dataio.formats.hdf5 import Hdf5File, open_hdf5, read_hdf5, scan_hdf5
from dataio.formats.numpy import read_npz, read_numpy, scan_npz, scan_numpy
from dataio.formats.safetensors import (
    SafetensorsFile,
    gds_available,
    gds_info,
    open_safetensors,
    read_safetensors,
    write_safetensors,
)
from dataio.formats.tfrecord import iter_tfrecord
from dataio.frame import (
    GroupBy,
    LazyFrame,
    read_feather,
    read_parquet,
    scan,
    scan_csv,
    scan_feather,
    scan_json,
    scan_parquet,
    scan_tfrecord,
    sql,
)
from dataio.io import (
    SSEEvent,
    Stream,
    configure_credentials,
    configure_endpoint,
    configure_transport,
    delete,
    exists,
    fetch_into,
    glob,
    head,
    ls,
    read,
    reader,
    stream,
    write,
    writer,
)
from dataio.pictures import show
from dataio.plan import runtime
from dataio.plan.custom import custom_op
from dataio.plan.expr import Expr, col, count, lit
from dataio.plan.pipeline import (
    BoundPipeline,
    Pipeline,
    Slot,
    batch,
    chain,
    collate,
    group_by,
    map,
    pipeline,
    slot,
    slots,
)
from dataio.sources import (
    IndexedSource,
    Source,
    archive,
    files,
    from_callable,
    from_iterable,
    from_iterator,
    from_sampler,
    manifest,
    records,
    urls,
    webdataset,
    write_webdataset_index,
)

if TYPE_CHECKING:
    import numpy as np

    from dataio.loader import Loader

__version__ = "0.1.0"

__all__ = [
    "AuthenticationError",
    "Batch",
    "BatchFailedError",
    "BoundPipeline",
    "CheckpointError",
    "DataLoader",
    "DataioError",
    "DecodeError",
    "DeviceError",
    "Expr",
    "FieldError",
    "FormatError",
    "GroupBy",
    "Hdf5File",
    "IndexedSource",
    "LazyFrame",
    "LimitError",
    "Loader",
    "NotFoundError",
    "OutOfRangeError",
    "PermissionDeniedError",
    "Pipeline",
    "PlanError",
    "QueryError",
    "SSEEvent",
    "SafetensorsFile",
    "ShapeMismatchError",
    "Slot",
    "Source",
    "Stream",
    "TensorView",
    "TransformError",
    "TransportError",
    "TransportTimeoutError",
    "__version__",
    "archive",
    "batch",
    "batch_transforms",
    "capabilities",
    "chain",
    "col",
    "collate",
    "cond",
    "configure_credentials",
    "configure_endpoint",
    "configure_transport",
    "count",
    "custom_op",
    "decoders",
    "delete",
    "exists",
    "fetch_into",
    "files",
    "from_callable",
    "from_iterable",
    "from_iterator",
    "from_sampler",
    "gds_available",
    "gds_info",
    "gds_open",
    "gds_read_into_tensor",
    "gds_register_buffer",
    "glob",
    "group_by",
    "head",
    "iter_tfrecord",
    "limits",
    "lit",
    "ls",
    "manifest",
    "map",
    "open_hdf5",
    "open_safetensors",
    "pipeline",
    "progress",
    "read",
    "read_feather",
    "read_hdf5",
    "read_image",
    "read_npz",
    "read_numpy",
    "read_parquet",
    "read_safetensors",
    "reader",
    "records",
    "scan",
    "scan_csv",
    "scan_feather",
    "scan_hdf5",
    "scan_json",
    "scan_npz",
    "scan_numpy",
    "scan_parquet",
    "scan_tfrecord",
    "show",
    "slot",
    "slots",
    "sql",
    "sql_context",
    "stream",
    "tensor_view",
    "testing",
    "transforms",
    "urls",
    "webdataset",
    "write",
    "write_safetensors",
    "write_webdataset_index",
    "writer",
]


def read_image(uri: str, *, mode: str = "rgb") -> np.ndarray:
    """Read and decode one image into a ``uint8`` ``(height, width, channels)`` array.

    Example:
        >>> dataio.read_image("cat.jpg", mode="rgb").shape  # doctest: +SKIP
        (375, 500, 3)
    """
    from dataio.decoders import IMAGE_MODES
    from dataio.io import read_bytes
    from dataio.udfs.image import decode_image

    if mode not in IMAGE_MODES:
        raise PlanError(f"read_image mode must be one of {list(IMAGE_MODES)}, got {mode!r}")
    return decode_image(read_bytes(uri), mode)


def sql_context() -> Any:
    """A DataFusion ``SessionContext`` where dataio's kernels are SQL functions.

    Example:
        >>> ctx = dataio.sql_context()  # doctest: +SKIP
        >>> ctx.sql("SELECT decode_image(bytes, 'rgb') FROM images")  # doctest: +SKIP
    """
    from dataio.engine.sql import sql_context as make

    return make()


def _loader() -> type[Loader]:
    from dataio.loader import Loader

    return Loader


def _engine() -> Any:
    from dataio.engine import frames

    return frames


def _apply_arrow() -> Any:
    from dataio.engine.apply import apply_arrow

    return apply_arrow


# Plans reach the runtime above them through dataio.plan.runtime (imports point one way); the
# runtime's modules load on first use, not here.
runtime.install(loader=_loader, engine=_engine, apply_arrow=_apply_arrow)


def capabilities() -> dict[str, Any]:
    """Report versions, worker counts and optional accelerators, discovering them lazily."""
    from dataio._capabilities import report

    return report()


def __getattr__(name: str) -> Any:
    if name == "Loader":
        from dataio.loader import Loader

        return Loader
    if name == "torch":  # dataio.torch imports torch: only when asked for
        import importlib

        return importlib.import_module("dataio.torch")
    raise AttributeError(f"module 'dataio' has no attribute {name!r}")
