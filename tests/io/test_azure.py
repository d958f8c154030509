"""az:// against Azurite: what only Azure does (account keys, SAS tokens, the account
name). Blobs are seeded and checked with requests signed here (Shared Key, account
SAS); what az:// shares with gs:// is in ``test_cloud_stores.py``."""

from __future__ import annotations

import pytest
from helpers.cloud_servers import AZURITE_ACCOUNT, AZURITE_KEY, Azurite

import dataio.io as dio
from dataio.exceptions import (
    AuthenticationError,
    DataioError,
    NotFoundError,
    PermissionDeniedError,
)
from dataio.io import config

CONTAINER = "dataio-tests"
# a well-formed key that is not the account's
WRONG_KEY = "d3Jvbmcta2V5LWZvci1kYXRhaW8tdGVzdHMtMDEyMzQ1Njc4OWFiY2RlZg=="


def test_a_missing_container_is_not_found(az: str) -> None:
    with pytest.raises(NotFoundError) as caught:
        dio.read("az://no-such-container/x.bin")
    assert isinstance(caught.value, FileNotFoundError)


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
