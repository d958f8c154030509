"""What gs:// (gcp-storage-emulator) and az:// (Azurite) must both do: objects are
seeded and checked through each server's own API, never through dataio alone.
What differs between them stays in ``test_gcs.py`` and ``test_azure.py``."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from helpers.cloud_servers import Azurite, GcsEmulator

import dataio.io as dio
from dataio.exceptions import NotFoundError, OutOfRangeError

BUCKET = "dataio-tests"  # the bucket and the container the session fixtures create


@dataclass(frozen=True)
class Cloud:
    """A test's base URI on one server, and that server's own client for names under it."""

    base: str
    put: Callable[[str, bytes], None]
    get: Callable[[str], bytes | None]


@pytest.fixture(params=["gs", "az"])
def cloud(request: pytest.FixtureRequest) -> Cloud:
    base: str = request.getfixturevalue(request.param)
    prefix = base.removeprefix(f"{request.param}://{BUCKET}/") + "/"
    if request.param == "gs":
        gcs: GcsEmulator = request.getfixturevalue("gcs_emulator")
        return Cloud(
            base,
            lambda name, data: gcs.upload(BUCKET, prefix + name, data),
            lambda name: gcs.download(BUCKET, prefix + name),
        )
    azurite: Azurite = request.getfixturevalue("azurite")
    return Cloud(
        base,
        lambda name, data: azurite.put_blob(BUCKET, prefix + name, data),
        lambda name: azurite.get_blob(BUCKET, prefix + name),
    )


def test_reads_objects_the_server_stored(cloud: Cloud) -> None:
    data = os.urandom(10_000)
    cloud.put("blob.bin", data)
    uri = cloud.base + "/blob.bin"

    assert dio.head(uri)["size"] == len(data)
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
    assert not dio.exists(cloud.base + "/absent.bin")


def test_missing_objects_are_not_found(cloud: Cloud) -> None:
    with pytest.raises(NotFoundError, match=r"absent\.bin") as caught:
        dio.read(cloud.base + "/absent.bin")
    assert isinstance(caught.value, FileNotFoundError)


def test_ls_and_glob(cloud: Cloud) -> None:
    names = ("a/x.bin", "a/sub/y.bin", "a/sub/deep/z.jpg", "b.jpg")
    for name in names:
        cloud.put(name, name.encode())
    base = cloud.base

    assert dio.ls(base + "/a/") == [base + "/a/sub/", base + "/a/x.bin"]
    assert dio.glob(base + "/**/*.jpg") == [base + "/a/sub/deep/z.jpg", base + "/b.jpg"]
    assert dio.glob(base + "/a/*/*.bin") == [base + "/a/sub/y.bin"]
    assert dio.glob(base + "/a/**") == sorted(f"{base}/{n}" for n in names[:3])


def test_writes_and_deletes_reach_the_server(cloud: Cloud) -> None:
    data = os.urandom(3000)
    assert dio.write(cloud.base + "/out.bin", data)
    assert cloud.get("out.bin") == data

    dio.delete(cloud.base + "/out.bin")
    assert cloud.get("out.bin") is None
    dio.delete(cloud.base + "/out.bin")  # deleting a missing object is not an error


def test_multipart_writer_assembles_the_parts(cloud: Cloud) -> None:
    chunks = [os.urandom(1 << 20) for _ in range(12)]
    with dio.writer(cloud.base + "/big.bin", part_size_mib=5) as w:
        assert w.write_chunks(chunks) == 12 << 20
    assert cloud.get("big.bin") == b"".join(chunks)


def test_aborted_writer_leaves_no_object(cloud: Cloud) -> None:
    with pytest.raises(RuntimeError), dio.writer(cloud.base + "/never.bin", part_size_mib=5) as w:
        w.write(os.urandom(6 << 20))
        raise RuntimeError("stop")
    assert cloud.get("never.bin") is None


@pytest.mark.usefixtures("always_split")
def test_large_reads_split_into_pinned_ranges(cloud: Cloud) -> None:
    data = os.urandom(3 << 20)
    cloud.put("large.bin", data)
    scheme = cloud.base.partition("://")[0]
    dio.configure_transport(scheme, readall_chunk_mib=1, readall_concurrency=4)
    assert dio.read(cloud.base + "/large.bin") == data
    buffer = bytearray(len(data))
    assert dio.fetch_into(cloud.base + "/large.bin", buffer) == len(data)
    assert bytes(buffer) == data
