"""az:// against Azurite: blobs are seeded and checked with requests signed here
(Shared Key, account SAS), never through dataio alone."""

from __future__ import annotations

import os

import pytest
from helpers.cloud_servers import AZURITE_ACCOUNT, AZURITE_KEY, Azurite

import dataio.io as dio
from dataio.exceptions import (
    AuthenticationError,
    DataioError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
)
from dataio.io import config

CONTAINER = "dataio-tests"
# a well-formed key that is not the account's
WRONG_KEY = "d3Jvbmcta2V5LWZvci1kYXRhaW8tdGVzdHMtMDEyMzQ1Njc4OWFiY2RlZg=="


def _key(uri: str) -> str:
    return uri.removeprefix(f"az://{CONTAINER}/")


def test_reads_blobs_azurite_stored(az: str, azurite: Azurite) -> None:
    data = os.urandom(10_000)
    azurite.put_blob(CONTAINER, _key(az) + "/blob.bin", data)
    uri = az + "/blob.bin"

    assert dio.head(uri)["size"] == len(data)
    assert dio.read(uri) == data
    assert dio.read(uri, offset=100, size=50) == data[100:150]
    assert dio.read(uri, offset=9_990, size=100) == data[9_990:]
    with pytest.raises(OutOfRangeError):
        dio.read(uri, offset=20_000, size=1)
    buffer = bytearray(len(data))
    assert dio.fetch_into(uri, buffer) == len(data)
    assert bytes(buffer) == data
    assert dio.reader(uri).read_all() == data
    assert bytes(dio.reader(uri).read_buffer()) == data
    assert dio.stream(uri).read_all() == data
    assert dio.exists(uri)
    assert not dio.exists(az + "/absent.bin")


def test_missing_blobs_and_containers_are_not_found(az: str) -> None:
    with pytest.raises(NotFoundError) as caught:
        dio.read(az + "/absent.bin")
    assert isinstance(caught.value, FileNotFoundError)
    with pytest.raises(NotFoundError):
        dio.read("az://no-such-container/x.bin")


def test_ls_and_glob(az: str, azurite: Azurite) -> None:
    for name in ("a/x.bin", "a/sub/y.bin", "a/sub/deep/z.jpg", "b.jpg"):
        azurite.put_blob(CONTAINER, f"{_key(az)}/{name}", name.encode())

    assert dio.ls(az + "/a/") == [az + "/a/sub/", az + "/a/x.bin"]
    assert dio.glob(az + "/**/*.jpg") == [az + "/a/sub/deep/z.jpg", az + "/b.jpg"]
    assert dio.glob(az + "/a/*/*.bin") == [az + "/a/sub/y.bin"]


def test_writes_and_deletes_reach_azurite(az: str, azurite: Azurite) -> None:
    data = os.urandom(3000)
    assert dio.write(az + "/out.bin", data)
    assert azurite.get_blob(CONTAINER, _key(az) + "/out.bin") == data

    dio.delete(az + "/out.bin")
    assert azurite.get_blob(CONTAINER, _key(az) + "/out.bin") is None
    dio.delete(az + "/out.bin")  # deleting a missing blob is not an error


def test_block_writer_commits_every_block(az: str, azurite: Azurite) -> None:
    chunks = [os.urandom(1 << 20) for _ in range(12)]
    with dio.writer(az + "/big.bin", part_size_mib=5) as w:
        assert w.write_chunks(chunks) == 12 << 20
    assert azurite.get_blob(CONTAINER, _key(az) + "/big.bin") == b"".join(chunks)

    with pytest.raises(RuntimeError), dio.writer(az + "/never.bin", part_size_mib=5) as w:
        w.write(os.urandom(6 << 20))
        raise RuntimeError("stop")
    assert azurite.get_blob(CONTAINER, _key(az) + "/never.bin") is None


def test_large_reads_split_into_ranges(az: str, azurite: Azurite) -> None:
    data = os.urandom(3 << 20)
    azurite.put_blob(CONTAINER, _key(az) + "/large.bin", data)
    dio.configure_transport("az", readall_chunk_mib=1, readall_concurrency=4)
    assert dio.read(az + "/large.bin") == data


def test_account_from_the_environment(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> None:
    azurite.put_blob(CONTAINER, "env/k.txt", b"from env")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", AZURITE_ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", AZURITE_KEY)
    dio.configure_endpoint("az", azurite.url)
    assert dio.read(f"az://{CONTAINER}/env/k.txt") == b"from env"
    assert config.redact(f"key={AZURITE_KEY}") == "key=***"


def test_sas_token_reads_and_its_permissions_hold(azurite: Azurite) -> None:
    azurite.put_blob(CONTAINER, "sas/k.txt", b"shared")
    sas = azurite.account_sas("rl")
    signature = dict(p.split("=", 1) for p in sas.split("&"))["sig"]
    dio.configure_endpoint("az", azurite.url)
    dio.configure_credentials("az", account_name=AZURITE_ACCOUNT, sas_token="?" + sas)
    assert dio.read(f"az://{CONTAINER}/sas/k.txt") == b"shared"
    assert dio.ls(f"az://{CONTAINER}/sas/") == [f"az://{CONTAINER}/sas/k.txt"]

    with pytest.raises(PermissionDeniedError) as caught:
        dio.write(f"az://{CONTAINER}/sas/new.txt", b"not allowed")
    assert signature not in str(caught.value)
    assert azurite.get_blob(CONTAINER, "sas/new.txt") is None


def test_a_wrong_key_is_an_authentication_error_without_the_key(azurite: Azurite) -> None:
    azurite.put_blob(CONTAINER, "auth/k.txt", b"x")
    dio.configure_endpoint("az", azurite.url)
    dio.configure_credentials("az", account_name=AZURITE_ACCOUNT, account_key=WRONG_KEY)
    with pytest.raises(AuthenticationError, match="AZURE_STORAGE_") as caught:
        dio.read(f"az://{CONTAINER}/auth/k.txt")
    assert WRONG_KEY not in str(caught.value) and AZURITE_KEY not in str(caught.value)


def test_redact_hides_sas_signatures_in_any_encoding() -> None:
    dio.configure_credentials("az", account_name="acct", sas_token="sv=2021&sig=ab%2Bcd%3D")
    text = "GET https://acct.blob.core.windows.net/c/k?sig=ab+cd= then sig=ab%2Bcd%3D"
    shown = config.redact(text)
    assert "ab+cd" not in shown and "ab%2Bcd" not in shown
    assert "acct.blob.core.windows.net" in shown  # the account name is not a secret
    assert config.redact("https://x/y?sv=1&sig=UNCONFIGURED123&se=2") == (
        "https://x/y?sv=1&sig=***&se=2"
    )


def test_az_needs_an_account(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "AZURE_STORAGE_ACCOUNT_NAME",
        "AZURE_STORAGE_ACCOUNT",
        "AZURE_STORAGE_USE_EMULATOR",
    ):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(DataioError, match="az:// needs a storage account"):
        dio.read("az://container/k.bin")
    with pytest.raises(DataioError, match="account_name"):
        dio.configure_credentials("az", account_key=AZURITE_KEY)
    with pytest.raises(DataioError, match="not several"):
        dio.configure_credentials("az", account_name="a", account_key="k", sas_token="s")
