"""Faults against real servers: missing objects, 5xx, a server dying mid-body, a stalled
response, wrong credentials and a denied action; credentials never leak into messages."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator

import pytest
from helpers.object_servers import MotoServer, RangeServer

import dataio.io as dio
from dataio.exceptions import (
    AuthenticationError,
    DataioError,
    NotFoundError,
    PermissionDeniedError,
    TransportError,
    TransportTimeoutError,
)


def test_transient_503s_are_retried_then_succeed(http: str, http_server: RangeServer) -> None:
    dio.write(f"{http}/a.bin", b"payload")
    http_server.fail_next = 2
    assert dio.read(f"{http}/a.bin") == b"payload"
    assert dio.head(f"{http}/a.bin")["size"] == 7


def test_retries_are_bounded(http: str, http_server: RangeServer) -> None:
    dio.write(f"{http}/a.bin", b"payload")
    http_server.requests.clear()
    http_server.fail_next = 100
    started = time.monotonic()
    with pytest.raises(DataioError, match="503"):
        dio.read(f"{http}/a.bin")
    assert time.monotonic() - started < 5
    assert len(http_server.requests) == 4  # one try and three retries


def test_server_killed_mid_body_is_a_clear_error_not_a_hang(
    http: str, http_server: RangeServer
) -> None:
    dio.configure_transport("http", timeout_secs=2)
    dio.write(f"{http}/big.bin", os.urandom(4 << 20))
    http_server.die_mid_body = True
    killer = threading.Thread(target=lambda: (http_server.half_sent.wait(10), http_server.kill()))
    killer.start()
    started = time.monotonic()
    with pytest.raises(TransportError) as info:
        dio.read(f"{http}/big.bin")
    killer.join(10)
    assert http_server.half_sent.is_set()
    assert time.monotonic() - started < 10
    assert "big.bin" in str(info.value) and isinstance(info.value, ConnectionError)


def test_a_dead_s3_server_is_a_transport_error() -> None:
    server = MotoServer()
    try:
        server.create_bucket("short-lived")
        dio.configure_endpoint("s3", server.url)
        dio.configure_credentials("s3", access_key_id="AKIAX", secret_access_key="secret-x")
        dio.configure_transport("s3", timeout_secs=2)
        dio.write("s3://short-lived/a.bin", b"a")
    finally:
        server.stop()
    started = time.monotonic()
    with pytest.raises(TransportError):
        dio.read_bytes("s3://short-lived/a.bin")
    assert time.monotonic() - started < 10


def test_a_stalled_response_hits_the_timeout(http: str, http_server: RangeServer) -> None:
    dio.write(f"{http}/slow.bin", b"slow")
    dio.configure_transport("http", timeout_secs=0.3)
    http_server.stall_secs = 2
    started = time.monotonic()
    with pytest.raises(TransportTimeoutError) as info:
        dio.read(f"{http}/slow.bin")
    assert isinstance(info.value, TimeoutError)
    assert time.monotonic() - started < 6
    assert "timeout_secs" in str(info.value)


def test_missing_bucket_and_http_404_are_not_found(s3: str, http: str) -> None:
    with pytest.raises(NotFoundError):
        dio.read("s3://no-such-bucket-here/key")
    with pytest.raises(NotFoundError):
        dio.read(f"{http}/nothing")


# -- credentials: moto checks signatures when IAM auth is on -------------------------

POLICY = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Resource": "*"}]}


@pytest.fixture(scope="module")
def authed_moto() -> Iterator[tuple[MotoServer, dict[str, str], dict[str, str]]]:
    """A moto server enforcing IAM: a full-access key and a list-only key."""
    import boto3

    # the first 7 requests (the IAM setup and the bucket) run unauthenticated
    server = MotoServer(env=dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="7"))
    try:
        iam = boto3.client(
            "iam",
            endpoint_url=server.url,
            region_name="us-east-1",
            aws_access_key_id="setup",
            aws_secret_access_key="setup",
        )
        keys = []
        for user, action in (("writer", "s3:*"), ("lister", "s3:ListBucket")):
            iam.create_user(UserName=user)
            key = iam.create_access_key(UserName=user)["AccessKey"]
            statement = dict(POLICY["Statement"][0], Action=action)  # type: ignore[arg-type]
            document = json.dumps(dict(POLICY, Statement=[statement]))
            iam.put_user_policy(UserName=user, PolicyName="p", PolicyDocument=document)
            keys.append({"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]})
        server.create_bucket("guarded")
        yield server, keys[0], keys[1]
    finally:
        server.stop()


def use(server: MotoServer, access_key_id: str, secret: str) -> None:
    dio.configure_endpoint("s3", server.url)
    dio.configure_credentials("s3", access_key_id=access_key_id, secret_access_key=secret)


def assert_no_secret(text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text


def test_wrong_credentials_are_authentication_errors_without_secrets(
    authed_moto, caplog: pytest.LogCaptureFixture
) -> None:
    server, writer, _ = authed_moto
    caplog.set_level(logging.DEBUG)
    use(server, writer["id"], writer["secret"])
    dio.write("s3://guarded/a.bin", b"guarded")
    assert dio.read("s3://guarded/a.bin") == b"guarded"
    wrong_secret = "wrong-" + writer["secret"]
    for key_id, secret in ((writer["id"], wrong_secret), ("AKIAUNKNOWNKEY12345", wrong_secret)):
        use(server, key_id, secret)
        with pytest.raises(AuthenticationError) as info:
            dio.read("s3://guarded/a.bin")
        error = info.value
        assert isinstance(error, PermissionError)
        assert error.__cause__ is None and error.__context__ is None
        assert_no_secret(str(error) + repr(error.args), key_id, secret, writer["secret"])
    assert_no_secret(caplog.text, writer["id"], writer["secret"], wrong_secret)


def test_a_denied_action_is_a_permission_error(authed_moto) -> None:
    server, writer, lister = authed_moto
    use(server, writer["id"], writer["secret"])
    dio.write("s3://guarded/b.bin", b"b")
    use(server, lister["id"], lister["secret"])
    assert "s3://guarded/b.bin" in dio.ls("s3://guarded/")  # listing is allowed
    with pytest.raises(PermissionDeniedError) as info:
        dio.read("s3://guarded/b.bin")
    assert_no_secret(str(info.value), lister["id"], lister["secret"])
