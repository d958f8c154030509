"""Record sources and their combinators."""

from dataio.sources.adapters import (
    from_callable,
    from_iterable,
    from_iterator,
    from_sampler,
    records,
)
from dataio.sources.archives import archive, webdataset, write_webdataset_index
from dataio.sources.base import IndexedSource, Source
from dataio.sources.files import files, manifest, urls

__all__ = [
    "IndexedSource",
    "Source",
    "archive",
    "files",
    "from_callable",
    "from_iterable",
    "from_iterator",
    "from_sampler",
    "manifest",
    "records",
    "urls",
    "webdataset",
    "write_webdataset_index",
]
