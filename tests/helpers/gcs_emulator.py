"""Run ``gcp-storage-emulator`` with the XML API routes that obstore's GCS client uses.

Usage: ``python gcs_emulator.py PORT [BEARER_TOKEN]`` (in memory, on 127.0.0.1).

The emulator (2026.7.19) stores objects and serves the JSON API, but its XML API is
only ``GET`` and ``PUT`` of ``/BUCKET/OBJECT``, and obstore's client (object_store
0.13, XML API only) needs more of it. What the emulator lacks, added here on top of
its own storage (its JSON API keeps working and is what the tests check against):

* ``HEAD /BUCKET/OBJECT`` (answered 501);
* ``ETag`` and ``Last-Modified`` on ``GET`` (obstore refuses a body without them),
  ``ETag`` on ``PUT``, ``416`` for a range past the end, ``If-Match``;
* ``GET /BUCKET?list-type=2`` (ListObjectsV2 XML listing; answered 501);
* ``DELETE /BUCKET/OBJECT`` (answered 501);
* XML multipart uploads: ``POST ?uploads``, ``PUT ?partNumber&uploadId``,
  ``POST ?uploadId``, ``DELETE ?uploadId`` (answered 501).

With a ``BEARER_TOKEN`` argument every XML request must carry it, as GCS checks
OAuth tokens; the emulator itself checks no credentials.
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
import threading
import time
import uuid
from datetime import datetime
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit
from xml.sax.saxutils import escape

from gcp_storage_emulator import server
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers import objects

_parts: dict[str, dict[int, bytes]] = {}
_targets: dict[str, tuple[str, str]] = {}
_lock = threading.Lock()
_token: str | None = None


def _close(self: Any) -> None:
    """The emulator's Response.close, minus the body on HEAD, with a settable length."""
    handler = self._handler
    content = self._content.encode() if isinstance(self._content, str) else self._content
    length = self._headers.pop("Content-Length", str(len(content)))
    handler.send_response(self.status.value, self.status.phrase)
    for k, v in self._headers.items():
        handler.send_header(k, v)
    handler.send_header("Content-Length", length)
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(content)


def _error(response: Any, status: HTTPStatus, code: str, message: str) -> None:
    response.status = status
    body = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
    body += f"<Message>{escape(message)}</Message></Error>"
    response.write_file(body.encode(), content_type="application/xml")


def _authorized(request: Any, response: Any) -> bool:
    if _token is not None and request.get_header("Authorization") != f"Bearer {_token}":
        _error(response, HTTPStatus.UNAUTHORIZED, "AuthenticationRequired", "Invalid token")
        return False
    return True


def _etag(obj: dict[str, Any]) -> str:
    return '"' + base64.b64decode(obj["md5Hash"]).hex() + '"'


def _meta_headers(response: Any, obj: dict[str, Any]) -> None:
    response["ETag"] = _etag(obj)
    updated = datetime.strptime(obj["updated"], "%Y-%m-%dT%H:%M:%S.%fZ")
    response["Last-Modified"] = updated.strftime("%a, %d %b %Y %H:%M:%S GMT")
    response["x-goog-generation"] = str(obj["generation"])
    response["Accept-Ranges"] = "bytes"


def object_route(request: Any, response: Any, storage: Any, *args: Any) -> None:
    if not _authorized(request, response):
        return
    method = request.method
    # the emulator's parsed query drops blank values such as ``?uploads``
    query = parse_qs(urlsplit(request.full_url).query, keep_blank_values=True)
    bucket, name = request.params["bucket_name"], request.params["object_id"]
    if method in ("GET", "HEAD"):
        _read(request, response, storage, bucket, name)
    elif method == "PUT" and "uploadId" in query:
        data = request.data or b""
        with _lock:
            _parts[query["uploadId"][0]][int(query["partNumber"][0])] = data
        response["ETag"] = '"' + hashlib.md5(data).hexdigest() + '"'
    elif method == "PUT":
        _store(request, response, storage, bucket, name, request.data or b"")
    elif method == "POST" and "uploads" in query:
        upload = uuid.uuid4().hex
        with _lock:
            _parts[upload], _targets[upload] = {}, (bucket, name)
        body = "<InitiateMultipartUploadResult><Bucket>{}</Bucket><Key>{}</Key>"
        body += "<UploadId>{}</UploadId></InitiateMultipartUploadResult>"
        response.write_file(
            body.format(escape(bucket), escape(name), upload).encode(), "application/xml"
        )
    elif method == "POST" and "uploadId" in query:
        _complete(request, response, storage, bucket, name, query["uploadId"][0])
    elif method == "DELETE" and "uploadId" in query:
        with _lock:
            _parts.pop(query["uploadId"][0], None)
        response.status = HTTPStatus.NO_CONTENT
    elif method == "DELETE":
        try:
            storage.delete_file(bucket, name)
            response.status = HTTPStatus.NO_CONTENT
        except NotFound:
            _error(response, HTTPStatus.NOT_FOUND, "NoSuchKey", "No such object")
    else:
        _error(response, HTTPStatus.NOT_IMPLEMENTED, "NotImplemented", method)


def _read(request: Any, response: Any, storage: Any, bucket: str, name: str) -> None:
    try:
        obj = storage.get_file_obj(bucket, name)
        data = storage.get_file(bucket, name)
    except NotFound:
        _error(response, HTTPStatus.NOT_FOUND, "NoSuchKey", "No such object")
        return
    _meta_headers(response, obj)
    wanted = request.get_header("If-Match")
    if wanted is not None and wanted != _etag(obj):
        _error(response, HTTPStatus.PRECONDITION_FAILED, "PreconditionFailed", wanted)
        return
    spec = request.get_header("Range")
    if spec and (found := re.fullmatch(r"bytes=(\d*)-(\d*)", spec.strip())):
        first, last = found.groups()
        start = int(first) if first else max(len(data) - int(last), 0)
        end = min(int(last), len(data) - 1) if first and last else len(data) - 1
        if start >= len(data):
            _error(response, HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, "InvalidRange", spec)
            return
        response.status = HTTPStatus.PARTIAL_CONTENT
        response["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        data = data[start : end + 1]
    response.write_file(data, content_type=obj.get("contentType"))
    if request.method == "HEAD":
        response["Content-Length"] = str(len(data))
        response.write_file(b"", content_type=obj.get("contentType"))


def _store(request: Any, response: Any, storage: Any, bucket: str, name: str, data: bytes) -> None:
    content_type = request.get_header("Content-Type", "application/octet-stream")
    obj = objects._make_object_resource(
        request.base_url, bucket, name, content_type, str(len(data))
    )
    obj = objects._checksums(data, obj)
    try:
        storage.create_file(bucket, name, data, obj)
    except NotFound:
        _error(response, HTTPStatus.NOT_FOUND, "NoSuchBucket", bucket)
        return
    response["ETag"] = _etag(obj)
    response["x-goog-generation"] = str(obj["generation"])


def _complete(
    request: Any, response: Any, storage: Any, bucket: str, name: str, upload: str
) -> None:
    body = request.data or b""
    numbers = [int(n) for n in re.findall(rb"<PartNumber>(\d+)</PartNumber>", body)]
    with _lock:
        parts = _parts.pop(upload, None)
    if parts is None or any(n not in parts for n in numbers):
        _error(response, HTTPStatus.BAD_REQUEST, "InvalidPart", upload)
        return
    _store(request, response, storage, bucket, name, b"".join(parts[n] for n in numbers))
    if response.status == HTTPStatus.OK:
        etag = escape(response["ETag"])
        xml = f"<CompleteMultipartUploadResult><ETag>{etag}</ETag></CompleteMultipartUploadResult>"
        response.write_file(xml.encode(), content_type="application/xml")


def bucket_route(request: Any, response: Any, storage: Any, *args: Any) -> None:
    """ListObjectsV2 in GCS's XML form (one page: the tests list few objects)."""
    if not _authorized(request, response):
        return
    query = request.query
    prefix = query.get("prefix", [""])[0]
    delimiter = query.get("delimiter", [None])[0]
    start_after = query.get("start-after", [""])[0]
    try:
        found, prefixes = storage.get_file_list(
            request.params["bucket_name"], prefix or None, delimiter
        )
    except NotFound:
        _error(response, HTTPStatus.NOT_FOUND, "NoSuchBucket", request.params["bucket_name"])
        return
    rows = []
    for obj in found:
        if obj["name"] <= start_after:
            continue
        rows.append(
            f"<Contents><Key>{escape(obj['name'])}</Key>"
            f"<LastModified>{obj['updated']}</LastModified>"
            f"<ETag>{escape(_etag(obj))}</ETag><Size>{obj['size']}</Size></Contents>"
        )
    rows += [f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>" for p in prefixes]
    xml = "<?xml version='1.0' encoding='UTF-8'?><ListBucketResult>"
    xml += f"<Name>{escape(request.params['bucket_name'])}</Name><Prefix>{escape(prefix)}</Prefix>"
    xml += "<IsTruncated>false</IsTruncated>" + "".join(rows) + "</ListBucketResult>"
    response.write_file(xml.encode(), content_type="application/xml")


class Handler(server.RequestHandler):
    def do_HEAD(self) -> None:
        server.Router(self).handle("HEAD")


def main() -> None:
    global _token
    port = int(sys.argv[1])
    _token = sys.argv[2] if len(sys.argv) > 2 else None
    server.Response.close = _close  # type: ignore[method-assign]
    every = dict.fromkeys(("GET", "HEAD", "PUT", "POST", "DELETE"), object_route)
    routes = [r for r in server.HANDLERS if not r[0].startswith(r"^/(?P<bucket_name>")]
    routes += [
        # obstore percent-encodes the bucket too ("dataio%2Dtests")
        (r"^/(?P<bucket_name>[-.%\w]+)/(?P<object_id>.*[^/]+)$", every),
        (r"^/(?P<bucket_name>[-.%\w]+)/?$", {"GET": bucket_route}),
    ]
    server.HANDLERS = tuple(routes)
    server.RequestHandler = Handler  # type: ignore[misc]
    emulator = server.create_server("127.0.0.1", port, in_memory=True)
    emulator.start()
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
