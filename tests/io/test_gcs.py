"""gs:// against gcp-storage-emulator: objects are seeded and checked through the
emulator's own JSON API, never through dataio alone."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from helpers.cloud_servers import GcsEmulator

import dataio.io as dio
from dataio.exceptions import (
    AuthenticationError,
    DataioError,
    NotFoundError,
    OutOfRangeError,
)

BUCKET = "dataio-tests"


def _key(uri: str) -> str:
    return uri.removeprefix(f"gs://{BUCKET}/")


def test_reads_objects_the_emulator_stored(gs: str, gcs_emulator: GcsEmulator) -> None:
    data = os.urandom(10_000)
    gcs_emulator.upload(BUCKET, _key(gs) + "/blob.bin", data)
    uri = gs + "/blob.bin"

    meta = dio.head(uri)
    assert meta["size"] == len(data)
    assert meta["etag"] == f'"{hashlib.md5(data).hexdigest()}"'
    assert dio.read(uri) == data
    assert dio.read(uri, offset=100, size=50) == data[100:150]
    assert dio.read(uri, offset=9_990, size=100) == data[9_990:]  # cut short at the end
    with pytest.raises(OutOfRangeError):
        dio.read(uri, offset=20_000, size=1)
    buffer = bytearray(len(data) + 7)
    assert dio.fetch_into(uri, buffer) == len(data)
    assert bytes(buffer[: len(data)]) == data
    assert dio.reader(uri).read_all() == data
    assert bytes(dio.reader(uri).read_buffer()) == data
    assert dio.stream(uri).read_all() == data
    assert dio.exists(uri)
    assert not dio.exists(gs + "/absent.bin")


def test_missing_objects_are_not_found(gs: str) -> None:
    with pytest.raises(NotFoundError, match=r"absent\.bin") as caught:
        dio.read(gs + "/absent.bin")
    assert isinstance(caught.value, FileNotFoundError)


def test_ls_and_glob_see_the_emulator_listing(gs: str, gcs_emulator: GcsEmulator) -> None:
    for name in ("a/x.bin", "a/sub/y.bin", "a/sub/deep/z.jpg", "b.jpg"):
        gcs_emulator.upload(BUCKET, f"{_key(gs)}/{name}", name.encode())

    assert dio.ls(gs + "/a/") == [gs + "/a/sub/", gs + "/a/x.bin"]
    assert dio.glob(gs + "/**/*.jpg") == [gs + "/a/sub/deep/z.jpg", gs + "/b.jpg"]
    assert dio.glob(gs + "/a/*/*.bin") == [gs + "/a/sub/y.bin"]
    expected = sorted(f"{_key(gs)}/{n}" for n in ("a/x.bin", "a/sub/y.bin", "a/sub/deep/z.jpg"))
    assert [_key(u) for u in dio.glob(gs + "/a/**")] == expected
    assert expected == gcs_emulator.names(BUCKET, _key(gs) + "/a/")


def test_writes_and_deletes_reach_the_emulator(gs: str, gcs_emulator: GcsEmulator) -> None:
    data = os.urandom(3000)
    etag = dio.write(gs + "/out.bin", data)
    assert etag == f'"{hashlib.md5(data).hexdigest()}"'
    assert gcs_emulator.download(BUCKET, _key(gs) + "/out.bin") == data

    dio.delete(gs + "/out.bin")
    assert gcs_emulator.download(BUCKET, _key(gs) + "/out.bin") is None
    dio.delete(gs + "/out.bin")  # deleting a missing object is not an error


def test_multipart_writer_assembles_the_parts(gs: str, gcs_emulator: GcsEmulator) -> None:
    chunks = [os.urandom(1 << 20) for _ in range(12)]
    with dio.writer(gs + "/big.bin", part_size_mib=5) as w:
        assert w.write_chunks(chunks) == 12 << 20
    assert gcs_emulator.download(BUCKET, _key(gs) + "/big.bin") == b"".join(chunks)


def test_aborted_writer_leaves_no_object(gs: str, gcs_emulator: GcsEmulator) -> None:
    with pytest.raises(RuntimeError), dio.writer(gs + "/never.bin", part_size_mib=5) as w:
        w.write(os.urandom(6 << 20))
        raise RuntimeError("stop")
    assert gcs_emulator.download(BUCKET, _key(gs) + "/never.bin") is None


def test_large_reads_split_into_pinned_ranges(gs: str, gcs_emulator: GcsEmulator) -> None:
    data = os.urandom(3 << 20)
    gcs_emulator.upload(BUCKET, _key(gs) + "/large.bin", data)
    dio.configure_transport("gs", readall_chunk_mib=1, readall_concurrency=4)
    assert dio.read(gs + "/large.bin") == data
    buffer = bytearray(len(data))
    assert dio.fetch_into(gs + "/large.bin", buffer) == len(data)
    assert bytes(buffer) == data


@pytest.mark.parametrize("form", ["json", "path"])
def test_service_account_reaches_an_emulator(
    gcs_emulator: GcsEmulator, tmp_path: Path, form: str
) -> None:
    """The emulator way of object_store: a key naming ``gcs_base_url`` with OAuth off,
    and no configured endpoint."""
    gcs_emulator.upload(BUCKET, f"sa-{form}.txt", b"via service account")
    key = gcs_emulator.service_account()
    if form == "json":
        dio.configure_credentials("gs", service_account_key=key)
    else:
        (tmp_path / "key.json").write_text(key)
        dio.configure_credentials("gs", service_account_path=str(tmp_path / "key.json"))
    assert dio.read(f"gs://{BUCKET}/sa-{form}.txt") == b"via service account"


def test_bearer_tokens_are_sent_and_never_shown() -> None:
    token = "ya29.dataio-test-oauth-token"
    server = GcsEmulator(bearer_token=token)
    try:
        server.create_bucket("private")
        server.upload("private", "k.txt", b"secret data")
        dio.configure_endpoint("gs", server.url)
        dio.configure_credentials("gs", bearer_token=token)
        assert dio.read("gs://private/k.txt") == b"secret data"

        wrong = "ya29.another-token-also-hidden"
        dio.configure_credentials("gs", bearer_token=wrong)
        with pytest.raises(AuthenticationError, match="GOOGLE_") as caught:
            dio.read("gs://private/k.txt")
        assert wrong not in str(caught.value) and token not in str(caught.value)
    finally:
        server.stop()


def test_gs_credentials_take_only_gcs_keys() -> None:
    with pytest.raises(DataioError, match=r"gs:// takes no access_key_id.*service_account"):
        dio.configure_credentials("gs", access_key_id="K", secret_access_key="S")
    with pytest.raises(DataioError, match="region applies to s3"):
        dio.configure_endpoint("gs", "http://127.0.0.1:1", region="eu")
