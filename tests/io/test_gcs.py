"""gs:// against gcp-storage-emulator: what only GCS does (MD5 ETags, service accounts,
OAuth tokens). Objects are seeded and checked through the emulator's own JSON API;
what gs:// shares with az:// is in ``test_cloud_stores.py``."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from helpers.cloud_servers import GcsEmulator

import dataio.io as dio
from dataio.exceptions import AuthenticationError, DataioError

BUCKET = "dataio-tests"


def _key(uri: str) -> str:
    return uri.removeprefix(f"gs://{BUCKET}/")


def test_etags_are_the_md5_of_the_content(gs: str, gcs_emulator: GcsEmulator) -> None:
    data = os.urandom(10_000)
    gcs_emulator.upload(BUCKET, _key(gs) + "/blob.bin", data)
    assert dio.head(gs + "/blob.bin")["etag"] == f'"{hashlib.md5(data).hexdigest()}"'
    assert dio.write(gs + "/out.bin", data) == f'"{hashlib.md5(data).hexdigest()}"'


def test_glob_finds_what_the_json_api_lists(gs: str, gcs_emulator: GcsEmulator) -> None:
    for name in ("a/x.bin", "a/sub/y.bin", "a/sub/deep/z.jpg", "b.jpg"):
        gcs_emulator.upload(BUCKET, f"{_key(gs)}/{name}", name.encode())
    found = [_key(u) for u in dio.glob(gs + "/a/**")]
    assert found == gcs_emulator.names(BUCKET, _key(gs) + "/a/")
    assert len(found) == 3


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
