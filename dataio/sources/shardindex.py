"""WebDataset shard indexes in the ``wids`` format: per-shard sample counts.

A shard index is a JSON file as the ``webdataset`` package's ``widsindex create``
writes it::

    {"__kind__": "wids-shard-index-v1", "wids_version": 1,
     "shardlist": [{"url": "shard-0000.tar", "nsamples": 2000, "filesize": 46137344}, ...]}

Relative ``url`` s resolve against the index's ``base`` when it has one, else against the
directory holding the index (wids' rule). With the counts a rank of a sharded pass knows
where its run of samples starts without walking the headers of every shard.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Sequence
from typing import Any

from dataio.exceptions import FormatError, NotFoundError
from dataio.io.uri import Location, parse

__all__ = ["INDEX_NAME", "ShardCounts", "default_index", "entry_url", "load", "write"]

#: the file a sharded pass looks for next to the first shard (``widsindex``' default name)
INDEX_NAME = "shardindex.json"

_Key = tuple[str, str, str]


def _key(loc: Location) -> _Key:
    return (loc.scheme, loc.authority, posixpath.normpath(loc.key))


class ShardCounts:
    """A loaded index: the URI it came from and each listed shard's sample count (and
    file size, when the index records it), by shard location."""

    def __init__(
        self, uri: str, entries: dict[_Key, tuple[int, int | None]], shards: list[str]
    ) -> None:
        self.uri = uri
        self.shards = shards  # the listed shards' URIs, in the index's order
        self._entries = entries
        names: dict[str, list[_Key]] = {}
        for key in entries:
            names.setdefault(posixpath.basename(key[2]), []).append(key)
        self._by_name = {n: keys[0] for n, keys in names.items() if len(keys) == 1}

    def lookup(self, shard: str, *, by_name: bool = True) -> tuple[int, int | None] | None:
        """``(nsamples, filesize)`` of ``shard``: by location, else (``by_name``) by file
        name when that name is unique in the index (an index written elsewhere, then
        copied)."""
        loc = parse(shard)
        found = self._entries.get(_key(loc))
        if found is None and by_name:
            key = self._by_name.get(posixpath.basename(loc.key))
            found = None if key is None else self._entries[key]
        return found

    def counts(self, shards: Sequence[str], *, by_name: bool = True) -> list[int] | None:
        """Each shard's count, in order; ``None`` when the index misses one."""
        out = []
        for shard in shards:
            found = self.lookup(shard, by_name=by_name)
            if found is None:
                return None
            out.append(found[0])
        return out

    def missing(self, shards: Sequence[str], *, by_name: bool = True) -> list[str]:
        """The shards the index does not list."""
        return [s for s in shards if self.lookup(s, by_name=by_name) is None]


def default_index(first_shard: str) -> str:
    """Where a shard index is looked for (and written by default): ``shardindex.json``
    in the directory of the first shard."""
    loc = parse(first_shard)
    return loc.child(posixpath.join(posixpath.dirname(loc.key), INDEX_NAME))


def _bad(uri: str, why: str) -> FormatError:
    return FormatError(
        f"webdataset index {uri!r} {why}; write it again with "
        "dataio.write_webdataset_index(pattern, uri)"
    )


def load(uri: str) -> ShardCounts:
    """Read and check a ``wids`` shard index.

    Raises:
        NotFoundError: there is no such file.
        FormatError: it is not a ``wids_version: 1`` index with a ``shardlist`` of
            ``{"url": str, "nsamples": int >= 0}`` entries.
    """
    from dataio.io.verbs import read

    try:
        doc = json.loads(read(uri))
    except NotFoundError:
        raise
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise _bad(uri, f"is not JSON ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("wids_version") != 1:
        raise _bad(uri, 'is not a wids shard index (no "wids_version": 1)')
    if doc.get("datasets"):
        raise _bad(uri, 'holds sub-datasets; list the shards in its "shardlist" instead')
    shardlist = doc.get("shardlist")
    if not isinstance(shardlist, list):
        raise _bad(uri, 'has no "shardlist" list')
    where = parse(uri)
    base = doc.get("base")
    if base is not None and not isinstance(base, str):
        raise _bad(uri, f"has a base {base!r} that is not a string")
    entries: dict[_Key, tuple[int, int | None]] = {}
    shards: list[str] = []
    for i, entry in enumerate(shardlist):
        if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
            raise _bad(uri, f'entry {i} has no "url" string')
        count, size = entry.get("nsamples"), entry.get("filesize")
        if type(count) is not int or count < 0:
            raise _bad(uri, f"entry {i} ({entry['url']!r}) has nsamples {count!r}")
        if size is not None and (type(size) is not int or size < 0):
            raise _bad(uri, f"entry {i} ({entry['url']!r}) has filesize {size!r}")
        loc = _resolve(where, base, entry["url"])
        entries[_key(loc)] = (count, size)
        shards.append(str(loc))
    return ShardCounts(uri, entries, shards)


def _resolve(index: Location, base: str | None, url: str) -> Location:
    """``url`` as wids resolves it: absolute as is, else against ``base`` or the
    index's directory."""
    if "://" in url or url.startswith("/"):
        return parse(url)
    if base is not None:
        if "://" in base or base.startswith("/"):
            root = parse(base.rstrip("/") + "/x")
            return parse(root.child(posixpath.join(posixpath.dirname(root.key), url)))
        directory = posixpath.join(posixpath.dirname(index.key), base)
    else:
        directory = posixpath.dirname(index.key)
    return parse(index.child(posixpath.normpath(posixpath.join(directory, url))))


def entry_url(index_uri: str, shard: str) -> str:
    """How the index at ``index_uri`` names ``shard``: relative to the index's directory
    when the shard lies under it, else the shard's URI."""
    index, loc = parse(index_uri), parse(shard)
    directory = posixpath.dirname(index.key)
    same = (index.scheme, index.authority) == (loc.scheme, loc.authority)
    if same and posixpath.normpath(loc.key).startswith(directory + "/"):
        return posixpath.relpath(posixpath.normpath(loc.key), directory)
    return shard


def write(uri: str, rows: Sequence[dict[str, Any]]) -> None:
    """Write an index of ``rows`` (``url``, ``nsamples``, ``filesize``) to ``uri``."""
    from dataio.io.verbs import write as put

    doc = {"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": list(rows)}
    put(uri, json.dumps(doc, indent=1).encode())
