"""Cloud object servers on 127.0.0.1 for the IO tests, each with its own client for
seeding and checking objects without dataio or obstore:

* :class:`Azurite` runs ``azurite-blob`` (npm, installed by ``make tools`` into
  ``.tools/``) and signs its own requests with the Shared Key scheme.
* :class:`GcsEmulator` runs the ``gcp-storage-emulator`` package with the XML API
  routes it lacks (see ``helpers/gcs_emulator.py``) and seeds through its JSON API.
* :class:`HubServer` is a small Hugging Face Hub: ``resolve`` URLs (redirecting
  large files to a separate CDN server, with the headers ``hf_hub_download`` reads),
  the ``tree`` API with pagination, repository info (``/api/KIND/ID/revision/REV``),
  repositories with and without owner, and private ones behind a bearer token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import sys
import time
import urllib.error
import urllib.request
from email.utils import formatdate
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from helpers.object_servers import RangeServer
from helpers.servers import QuietHandler, ServerProcess, ThreadedServer, free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
AZURITE = REPO_ROOT / ".tools" / "node_modules" / ".bin" / "azurite-blob"
# the storage emulator's published development account (not a secret)
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


class Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body


def _request(
    method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> Response:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return Response(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as error:
        return Response(error.code, dict(error.headers), error.read())


# -- Azure ---------------------------------------------------------------------------


class Azurite(ServerProcess):
    """``azurite-blob`` in memory on a free port; requests signed with the account key."""

    def __init__(self) -> None:
        if not AZURITE.exists():
            raise RuntimeError(f"{AZURITE} is missing: run `make tools` (npm azurite@3.35.0)")
        port = free_port()
        command = [
            str(AZURITE),
            "--inMemoryPersistence",
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--skipApiVersionCheck",
            "--loose",
            "--disableTelemetry",
            "--silent",
        ]
        super().__init__(command, port=port, name="azurite")

    @property
    def url(self) -> str:
        """The account endpoint, path style: ``http://127.0.0.1:PORT/devstoreaccount1``."""
        return f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"

    def call(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        key: str = AZURITE_KEY,
    ) -> Response:
        """A Shared Key signed request; ``path`` is ``container[/blob][?query]``."""
        all_headers = {
            "x-ms-date": formatdate(usegmt=True),
            "x-ms-version": "2021-08-06",
            **(headers or {}),
        }
        data = body if method in ("PUT", "POST") else None
        if data is not None:
            # urllib would add a form Content-Type, which the signature must cover
            all_headers.setdefault("Content-Type", "application/octet-stream")
            all_headers["Content-Length"] = str(len(data))
        url = f"{self.url}/{path}"
        all_headers["Authorization"] = _shared_key(method, url, all_headers, key)
        return _request(method, url, data, all_headers)

    def create_container(self, name: str) -> None:
        response = self.call("PUT", f"{name}?restype=container")
        assert response.status in (201, 409), response.body

    def put_blob(self, container: str, name: str, data: bytes) -> None:
        path = f"{container}/{quote(name)}"
        response = self.call("PUT", path, data, {"x-ms-blob-type": "BlockBlob"})
        assert response.status == 201, response.body

    def get_blob(self, container: str, name: str) -> bytes | None:
        response = self.call("GET", f"{container}/{quote(name)}")
        if response.status == 404:
            return None
        assert response.status == 200, response.body
        return response.body

    def account_sas(self, permissions: str = "rl", key: str = AZURITE_KEY) -> str:
        """An account SAS token (query string without ``?``) for blob objects and containers."""
        fields = {
            "sv": "2021-08-06",
            "ss": "b",
            "srt": "co",
            "sp": permissions,
            "se": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600)),
            "spr": "https,http",
        }
        to_sign = "\n".join(
            [
                AZURITE_ACCOUNT,
                fields["sp"],
                fields["ss"],
                fields["srt"],
                "",
                fields["se"],
                "",
                fields["spr"],
                fields["sv"],
                "",
                "",
            ]
        )
        fields["sig"] = _hmac(key, to_sign)
        return "&".join(f"{k}={quote(v, safe='')}" for k, v in fields.items())


def _hmac(key: str, text: str) -> str:
    digest = hmac.new(base64.b64decode(key), text.encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def _shared_key(method: str, url: str, headers: dict[str, str], key: str) -> str:
    lower = {k.lower(): v for k, v in headers.items()}
    standard = [
        "content-encoding",
        "content-language",
        "content-length",
        "content-md5",
        "content-type",
        "date",
        "if-modified-since",
        "if-match",
        "if-none-match",
        "if-unmodified-since",
        "range",
    ]
    if lower.get("content-length") == "0":
        lower["content-length"] = ""
    lines = [method] + [lower.get(name, "") for name in standard]
    lines += [f"{k}:{v}" for k, v in sorted(lower.items()) if k.startswith("x-ms-")]
    parts = urlsplit(url)
    # path-style emulator URLs name the account twice in the signed resource
    resource = f"/{AZURITE_ACCOUNT}{parts.path}"
    query: dict[str, list[str]] = {}
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        query.setdefault(k.lower(), []).append(v)
    resource += "".join(f"\n{k}:{','.join(sorted(v))}" for k, v in sorted(query.items()))
    lines.append(resource)
    return f"SharedKey {AZURITE_ACCOUNT}:{_hmac(key, chr(10).join(lines))}"


# -- Google Cloud Storage ------------------------------------------------------------


class GcsEmulator(ServerProcess):
    """``gcp-storage-emulator`` (in memory, plus XML API routes) on a free port."""

    def __init__(self, *, bearer_token: str | None = None) -> None:
        port = free_port()
        launcher = Path(__file__).with_name("gcs_emulator.py")
        command = [sys.executable, str(launcher), str(port)]
        if bearer_token is not None:
            command.append(bearer_token)
        super().__init__(command, port=port, name="gcp-storage-emulator")

    def service_account(self) -> str:
        """A service-account key (JSON text) that sends requests here, without OAuth."""
        return json.dumps(
            {
                "gcs_base_url": self.url,
                "disable_oauth": True,
                "client_email": "",
                "private_key": "",
                "private_key_id": "",
            }
        )

    def create_bucket(self, name: str) -> None:
        body = json.dumps({"name": name}).encode()
        response = _request(
            "POST",
            f"{self.url}/storage/v1/b?project=test",
            body,
            {"Content-Type": "application/json"},
        )
        assert response.status in (200, 409), response.body

    def upload(self, bucket: str, name: str, data: bytes) -> None:
        """Store an object through the emulator's JSON API (media upload)."""
        url = f"{self.url}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote(name)}"
        response = _request("POST", url, data, {"Content-Type": "application/octet-stream"})
        assert response.status == 200, response.body

    def download(self, bucket: str, name: str) -> bytes | None:
        """An object's bytes through the JSON API, or None when it does not exist."""
        url = f"{self.url}/storage/v1/b/{bucket}/o/{quote(name, safe='')}?alt=media"
        response = _request("GET", url)
        if response.status == 404:
            return None
        assert response.status == 200, response.body
        return response.body

    def names(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object name under ``prefix``, from the JSON API's listing."""
        url = f"{self.url}/storage/v1/b/{bucket}/o?prefix={quote(prefix)}"
        response = _request("GET", url)
        assert response.status == 200, response.body
        return sorted(item["name"] for item in json.loads(response.body).get("items") or [])


# -- Hugging Face Hub ----------------------------------------------------------------

KINDS = {"": "models", "datasets/": "datasets", "spaces/": "spaces"}


class Repo:
    """One repository: files per revision, and whether reading it needs the token.
    ``repo_id`` is ``owner/name``, or ``name`` alone for a repository without owner."""

    def __init__(self, kind: str, repo_id: str, *, private: bool = False) -> None:
        self.kind, self.repo_id, self.private = kind, repo_id, private
        self.revisions: dict[str, dict[str, bytes]] = {}
        self.puts: dict[str, int] = {}  # files put on each revision: a new commit each

    def put(self, path: str, data: bytes, *, revision: str = "main") -> None:
        self.revisions.setdefault(revision, {})[path] = data
        self.puts[revision] = self.puts.get(revision, 0) + 1

    def commit(self, revision: str) -> str:
        """The (made-up) commit hash that ``revision`` points at: stable until a file is
        put on that revision, as a push moves a branch to a new commit."""
        made = f"{self.kind}/{self.repo_id}@{revision}#{self.puts.get(revision, 0)}"
        return hashlib.sha1(made.encode()).hexdigest()

    def files(self, revision: str) -> tuple[str, dict[str, bytes]] | None:
        """``(branch or tag, files)`` of a revision given by name or by commit hash."""
        if revision in self.revisions:
            return revision, self.revisions[revision]
        named = next((r for r in self.revisions if self.commit(r) == revision), None)
        return None if named is None else (named, self.revisions[named])


class HubHandler(QuietHandler):
    """The Hub's routes: ``/[kind/]ID/resolve/REV/PATH``, ``/api/KIND/ID/tree/REV[/PATH]``
    and ``/api/KIND/ID[/revision/REV]`` (repository info, as ``repo_info`` asks)."""

    server: HubServer

    def _error(self, status: int, code: str, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.reply(status, body, {"X-Error-Code": code, "Content-Type": "application/json"})

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        raw_path, _, query = self.path.partition("?")
        self.server.requests.append((self.command, self.path, dict(self.headers)))
        segments = [unquote(s) for s in raw_path.strip("/").split("/")]
        if segments[:1] == ["api"]:
            self._api(segments[1:], dict(parse_qsl(query)))
        else:
            self._resolve(segments)

    def _repo(self, kind: str, repo_id: str) -> Repo | None:
        moved = self.server.renamed.get((kind, repo_id))
        if moved is not None:
            # a renamed repository answers with a same-origin redirect to its new id
            path, mark, query = self.path.partition("?")
            path = (path + "/").replace(f"/{repo_id}/", f"/{moved}/", 1)[:-1]
            self.reply(307, b"", {"Location": path + mark + query})
            return None
        repo = self.server.repos.get((kind, repo_id))
        wanted = f"Bearer {self.server.token}"
        if repo is None or (repo.private and self.headers.get("Authorization") != wanted):
            # the hub answers 401 alike for private and missing repos
            self._error(401, "RepoNotFound", "Repository not found")
            return None
        return repo

    def _revision(self, repo: Repo, revision: str) -> tuple[str, dict[str, bytes]] | None:
        found = repo.files(revision)
        if found is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return found

    def _resolve(self, segments: list[str]) -> None:
        kind = "models"
        if segments[0] in ("datasets", "spaces"):
            kind, segments = segments[0], segments[1:]
        # ID/resolve/... or, for a repository without owner, NAME/resolve/...
        at = next((i for i in (1, 2) if segments[i : i + 1] == ["resolve"]), None)
        if at is None or len(segments) < at + 3:
            self._error(404, "NotFound", "not a resolve URL")
            return
        repo = self._repo(kind, "/".join(segments[:at]))
        if repo is None:
            return
        found = self._revision(repo, segments[at + 1])
        if found is None:
            return
        branch, files = found
        path = "/".join(segments[at + 2 :])
        data = files.get(path)
        commit = {"X-Repo-Commit": repo.commit(branch)}
        if data is None:
            body = json.dumps({"error": f"{path} does not exist"}).encode()
            headers = {"X-Error-Code": "EntryNotFound", "Content-Type": "application/json"}
            self.reply(404, body, {**headers, **commit})
            return
        digest = hashlib.sha256(data).hexdigest()
        if len(data) >= self.server.lfs_threshold:
            # LFS files live on the CDN: the hub redirects there, as the real one does
            blob = f"/blobs/{digest}?X-Amz-Signature=cdn-signature"
            self.server.cdn.objects[blob] = data
            location = self.server.cdn.url + blob
            headers = {"Location": location, "X-Linked-Size": str(len(data))}
            self.reply(302, b"", {**headers, "X-Linked-Etag": f'"{digest}"', **commit})
            return
        self._ranged(data, f'"{hashlib.sha1(data).hexdigest()}"', commit)

    def _ranged(self, data: bytes, etag: str, extra: dict[str, str] | None = None) -> None:
        headers = {"ETag": etag, "Accept-Ranges": "bytes", **(extra or {})}
        spec = self.headers.get("Range")
        if spec is None:
            self.reply(200, data, headers)
            return
        first, _, last = spec.removeprefix("bytes=").partition("-")
        start = int(first) if first else max(len(data) - int(last), 0)
        end = min(int(last), len(data) - 1) if first and last else len(data) - 1
        if start >= len(data):
            self.reply(416, b"", {"Content-Range": f"bytes */{len(data)}"})
            return
        headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        self.reply(206, data[start : end + 1], headers)

    def _api(self, segments: list[str], query: dict[str, str]) -> None:
        # /api/{models|datasets|spaces}/ID/tree/REV[/PATH] or /api/KIND/ID[/revision/REV]
        kind, rest = segments[0], segments[1:]
        for route in ("tree", "revision"):
            at = next((i for i in (1, 2) if rest[i : i + 1] == [route]), None)
            if at is not None and len(rest) > at + 1:
                break
        else:
            route, at = "info", len(rest)
        if at == 0 or at > 2:
            self._error(404, "NotFound", "not an API URL")
            return
        repo = self._repo(kind, "/".join(rest[:at]))
        if repo is None:
            return
        found = self._revision(repo, rest[at + 1] if route != "info" else "main")
        if found is None:
            return
        if route == "tree":
            self._tree(found[1], "/".join(rest[at + 2 :]), query)
            return
        branch, files = found
        info = {
            "id": repo.repo_id,
            "sha": repo.commit(branch),
            "private": repo.private,
            "siblings": [{"rfilename": name} for name in sorted(files)],
        }
        self.reply(200, json.dumps(info).encode(), {"Content-Type": "application/json"})

    def _tree(self, files: dict[str, bytes], base: str, query: dict[str, str]) -> None:
        entries = _tree_entries(files, base, recursive=query.get("recursive") in ("true", "True"))
        if entries is None:
            self._error(404, "EntryNotFound", f"{base} does not exist")
            return
        start = int(query.get("cursor", "0"))
        page = entries[start : start + self.server.page_size]
        headers = {"Content-Type": "application/json"}
        if start + self.server.page_size < len(entries):
            query = {**query, "cursor": str(start + self.server.page_size)}
            next_url = f"{self.server.url}{self.path.partition('?')[0]}?" + "&".join(
                f"{k}={quote(v)}" for k, v in query.items()
            )
            headers["Link"] = f'<{next_url}>; rel="next"'
        self.reply(200, json.dumps(page).encode(), headers)


def _tree_entries(files: dict[str, bytes], base: str, *, recursive: bool) -> list[Any] | None:
    prefix = base.rstrip("/") + "/" if base else ""
    entries: dict[str, dict[str, Any]] = {}
    for path, data in files.items():
        if not path.startswith(prefix):
            continue
        parts = path[len(prefix) :].split("/")
        for depth in range(1, len(parts)):
            if depth > 1 and not recursive:
                break
            folder = prefix + "/".join(parts[:depth])
            entries[folder] = {"type": "directory", "oid": "0" * 40, "size": 0, "path": folder}
        if recursive or len(parts) == 1:
            oid = hashlib.sha1(data).hexdigest()
            entries[path] = {"type": "file", "oid": oid, "size": len(data), "path": path}
    if not entries and base:
        return None
    return [entries[k] for k in sorted(entries)]


class HubServer(ThreadedServer):
    """A Hugging Face Hub on 127.0.0.1 with a CDN (a second server, another origin)."""

    def __init__(self, *, token: str, lfs_threshold: int = 1024, page_size: int = 3) -> None:
        self.token = token
        self.lfs_threshold = lfs_threshold
        self.page_size = page_size
        self.repos: dict[tuple[str, str], Repo] = {}
        self.renamed: dict[tuple[str, str], str] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.cdn = RangeServer()
        super().__init__(HubHandler)

    def repo(self, kind: str, repo_id: str, *, private: bool = False) -> Repo:
        """Create (or fetch) a repository; ``kind`` is models, datasets or spaces;
        ``repo_id`` is ``owner/name`` or, as legacy repositories (gpt2), ``name``."""
        found = self.repos.setdefault((kind, repo_id), Repo(kind, repo_id, private=private))
        return found

    def rename(self, kind: str, old: str, new: str) -> None:
        """Move a repository to a new id; the old one redirects there, as the Hub did
        when repositories without owner moved to organisations (gpt2)."""
        self.repos[(kind, new)] = self.repos.pop((kind, old))
        self.repos[(kind, new)].repo_id = new
        self.renamed[(kind, old)] = new

    def stop(self) -> None:
        super().stop()
        self.cdn.kill()
