"""Configuration state: redaction of secrets and what reset() forgets."""

from __future__ import annotations

import pytest
from helpers.servers import free_port

import dataio.io as dio
from dataio.exceptions import TransportError
from dataio.io import config


def test_passwords_in_uris_are_masked_in_messages() -> None:
    assert (
        config.redact("GET 'http://bob:s3cret@host:8080/x'") == "GET 'http://bob:***@host:8080/x'"
    )
    assert config.redact("http://host/a:b@c") == "http://host/a:b@c"  # a path, not userinfo
    port = free_port()  # nothing listens there
    dio.configure_transport("http", timeout_secs=1)
    with pytest.raises(TransportError) as info:
        dio.read(f"http://bob:s3cret@127.0.0.1:{port}/x")
    assert "s3cret" not in str(info.value)


def test_reset_forgets_the_stores_made_for_streams() -> None:
    built: list[int] = []

    def build() -> object:
        built.append(1)
        return object()

    store = object()
    first = config.derived_store(store, "stream", build)
    assert config.derived_store(store, "stream", build) is first
    config.reset()
    assert config.derived_store(store, "stream", build) is not first
    assert len(built) == 2


def test_a_store_built_concurrently_is_shared_with_the_first_one_kept() -> None:
    made: list[object] = []

    def build() -> object:
        mine = object()
        made.append(mine)
        if len(made) == 1:  # another thread asks, and finishes first, while this one builds
            config.derived_store(store, "race", build)
        return mine

    store = object()
    first = config.derived_store(store, "race", build)
    assert first is made[1]  # the store the other thread cached, not a second one
    assert config.derived_store(store, "race", build) is first
