"""One URI surface over obstore: local paths and ``file://``, ``s3://``, ``r2://``,
``gs://``, ``az://``, ``http(s)://`` and ``hf://``. Pipelines read through
:func:`read_bytes`; scripts use the verbs, :func:`stream` reads a body on demand, and
``DATAIO_CACHE_DIR`` turns on a local cache of whole remote objects
(:mod:`dataio.io.cache`)."""

from dataio.io.config import configure_credentials, configure_endpoint, configure_transport
from dataio.io.handles import Reader, Writer, reader, writer
from dataio.io.read import read_bytes
from dataio.io.stream import SSEEvent, Stream, stream
from dataio.io.verbs import delete, exists, fetch_into, glob, head, ls, read, write

__all__ = [
    "Reader",
    "SSEEvent",
    "Stream",
    "Writer",
    "configure_credentials",
    "configure_endpoint",
    "configure_transport",
    "delete",
    "exists",
    "fetch_into",
    "glob",
    "head",
    "ls",
    "read",
    "read_bytes",
    "reader",
    "stream",
    "write",
    "writer",
]
