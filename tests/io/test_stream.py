"""``dataio.stream``: one cursor over bytes, lines and Server-Sent Events, on every
backend; limits; no body retries; timeouts that count waiting, not the caller's time."""

from __future__ import annotations

import os
import threading
import time
from urllib.parse import quote

import pytest
from helpers.object_servers import RangeServer
from helpers.proxy_server import ProxyServer
from helpers.stream_server import Script, StreamServer, split
from helpers.tls_server import Authority, TLSRangeServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dataio.io as dio
from dataio.exceptions import DataioError, NotFoundError, TransportError, TransportTimeoutError
from dataio.io.stream import SSEEvent


def body_lines(n: int) -> bytes:
    return b"".join(f"line {i}: {'x' * (i % 7)}\n".encode() for i in range(n))


def test_stream_reads_lines_and_bytes_on_every_backend(base: str) -> None:
    data = body_lines(2000)
    dio.write(f"{base}/log.txt", data)
    with dio.stream(f"{base}/log.txt") as s:
        assert s.size == len(data)
        assert list(s.iter_lines()) == data.decode().splitlines()
    with dio.stream(f"{base}/log.txt") as s:
        assert b"".join(s) == data
    with dio.stream(f"{base}/log.txt") as s:
        assert s.read(10) == data[:10]
        assert s.read_all() == data[10:]
        assert s.read(5) == b""
    with pytest.raises(NotFoundError):
        dio.stream(f"{base}/missing.txt")


def test_bytes_lines_and_events_continue_where_the_other_stopped(
    stream_server: StreamServer,
) -> None:
    head = b"HEADER12"
    text = "first line\r\nsecond\rthird\n"
    events = "event: tick\ndata: a\ndata: b\nid: 7\n\n: a comment\ndata: c\n\n"
    tail = os.urandom(3000)
    body = head + text.encode() + events.encode() + tail
    # pieces of 5 bytes: every boundary (CR|LF, mid-line, mid-field) is crossed
    stream_server.routes["/mixed"] = Script(split(body, 5))
    with dio.stream(f"{stream_server.url}/mixed") as s:
        assert s.read(3) == head[:3]
        chunks = s.iter_bytes()
        assert next(chunks) == head[3:5]  # the rest of the buffered piece, nothing lost
        assert s.read(3) == head[5:]
        lines = s.iter_lines()
        assert [next(lines) for _ in range(3)] == text.splitlines()
        sse = s.iter_sse()
        assert next(sse) == SSEEvent("tick", "a\nb", "7", None)
        assert next(sse) == SSEEvent("message", "c", "7", None)
        assert s.tell() == len(head) + len(text) + len(events)
        assert b"".join(s.iter_bytes()) == tail
    assert stream_server.gets("/mixed") == 1


def wire(events: list[SSEEvent], newline: str) -> str:
    """Server-Sent Events as a server writes them (the oracle for the parser)."""
    out = []
    for e in events:
        block = [": keep-alive"]
        if e.event != "message":
            block.append(f"event: {e.event}")
        block += [f"data: {line}" for line in e.data.split("\n")]
        if e.id is not None:
            block.append(f"id: {e.id}")
        if e.retry is not None:
            block.append(f"retry: {e.retry}")
        out.append(newline.join(block) + newline + newline)
    return "".join(out)


field_text = st.text(st.characters(blacklist_characters="\r\n\0", codec="utf-8"), max_size=20)
sse_events = st.lists(
    st.builds(
        SSEEvent,
        event=st.sampled_from(["message", "update", "done"]),
        data=st.lists(field_text, min_size=1, max_size=3).map("\n".join),
        id=st.one_of(st.none(), st.text("abc123", min_size=1, max_size=5)),
        retry=st.one_of(st.none(), st.integers(0, 10_000)),
    ),
    max_size=8,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=sse_events, newline=st.sampled_from(["\n", "\r\n", "\r"]), piece=st.integers(1, 9))
def test_sse_parsing_equals_what_was_sent(
    tmp_path_factory: pytest.TempPathFactory, events: list[SSEEvent], newline: str, piece: int
) -> None:
    path = tmp_path_factory.mktemp("sse") / "events"
    path.write_bytes(wire(events, newline).encode())
    got = list(dio.stream(path, line_limit=64).iter_sse())
    # id and retry persist across events, as EventSource keeps them
    expected, last_id, retry = [], None, None
    for e in events:
        last_id = e.id if e.id is not None else last_id
        retry = e.retry if e.retry is not None else retry
        expected.append(SSEEvent(e.event, e.data, last_id, retry))
    assert got == expected


def test_sse_edge_cases_follow_the_event_stream_format(stream_server: StreamServer) -> None:
    text = (
        "\ufeffdata\n\n"  # a BOM, and a field without a colon: one empty data line
        "event: ignored\n\n"  # no data: nothing is dispatched, the type resets
        "data:no space\n"
        "data:  two spaces\n"
        "retry: soon\n"  # not digits: ignored
        "unknown: field\n\n"
        "data: unfinished"  # no blank line before the end: dropped
    )
    stream_server.routes["/edge"] = Script(split(text.encode(), 3))
    events = list(dio.stream(f"{stream_server.url}/edge").iter_sse())
    assert events == [
        SSEEvent("message", "", None, None),
        SSEEvent("message", "no space\n two spaces"),
    ]


def test_lines_and_events_over_the_limit_are_clear_errors(stream_server: StreamServer) -> None:
    stream_server.routes["/long"] = Script([b"short\n", b"y" * 5000, b"\n"])
    uri = f"{stream_server.url}/long"
    lines = dio.stream(uri, line_limit=1024).iter_lines()
    assert next(lines) == "short"
    with pytest.raises(DataioError, match=r"line_limit=1024.*larger line_limit") as info:
        next(lines)
    assert uri in str(info.value)
    assert list(dio.stream(uri, line_limit=8000).iter_lines()) == ["short", "y" * 5000]
    many = "".join(f"data: {i:04}\n" for i in range(300)) + "\n"
    stream_server.routes["/big-event"] = Script([many.encode()])
    with pytest.raises(DataioError, match=r"event_limit=1000.*larger event_limit"):
        next(dio.stream(f"{stream_server.url}/big-event", event_limit=1000).iter_sse())
    (event,) = dio.stream(f"{stream_server.url}/big-event").iter_sse()
    assert event.data.split("\n") == [f"{i:04}" for i in range(300)]
    with pytest.raises(DataioError, match="line_limit must be a positive"):
        dio.stream(uri, line_limit=0)


def route(server: StreamServer, path: str, script: Script) -> str:
    """Serve ``script`` at ``path``; the URI that reads it (s3 when it is an S3 path)."""
    server.routes[path] = script
    if path.startswith("/bucket/"):
        return "s3:/" + path
    return server.url + path


@pytest.fixture(params=["http", "s3"])
def scripted(request: pytest.FixtureRequest, stream_server: StreamServer) -> tuple[str, str]:
    """(scheme, route path): an http(s) route, or an S3 object served by the same server
    (read through obstore)."""
    if request.param == "s3":
        request.getfixturevalue("scripted_s3")
        return "s3", "/bucket/obj"
    return "http", "/obj"


def test_a_body_broken_mid_way_is_an_error_and_never_requested_again(
    stream_server: StreamServer, scripted: tuple[str, str]
) -> None:
    scheme, path = scripted
    pieces = split(os.urandom(200_000), 20_000)
    uri = route(stream_server, path, Script(pieces, chunked=scheme == "http", die_after=4))
    got = bytearray()
    with pytest.raises(TransportError, match="not retried") as info, dio.stream(uri) as s:
        for chunk in s:
            got += chunk
    assert uri.rsplit("/", 1)[1] in str(info.value)
    assert bytes(got) == b"".join(pieces)[: len(got)] and len(got) <= 4 * 20_000
    assert stream_server.gets(path) == 1  # obstore would have resumed with a second GET


def test_a_slow_consumer_outlives_the_timeout(
    stream_server: StreamServer, scripted: tuple[str, str]
) -> None:
    scheme, path = scripted
    dio.configure_transport(scheme, timeout_secs=0.2)
    lines = [f"event {i}\n".encode() for i in range(3)]
    uri = route(stream_server, path, Script(lines, chunked=scheme == "http"))
    got = []
    with dio.stream(uri) as s:
        for line in s.iter_lines():
            got.append(line)
            time.sleep(0.35)  # the caller's own work, longer than the timeout
    assert got == [line.decode().strip() for line in lines]


def test_a_server_stalled_mid_body_hits_the_timeout(
    stream_server: StreamServer, scripted: tuple[str, str]
) -> None:
    scheme, path = scripted
    dio.configure_transport(scheme, timeout_secs=0.3)
    never = threading.Event()  # set only when the server stops
    script = Script([b"first\n", b"second\n"], chunked=scheme == "http", hold={1: never})
    uri = route(stream_server, path, script)
    started = time.monotonic()
    with dio.stream(uri) as s:
        lines = s.iter_lines()
        assert next(lines) == "first"
        with pytest.raises(TransportTimeoutError, match="timeout_secs") as info:
            next(lines)
    assert isinstance(info.value, TimeoutError)
    assert time.monotonic() - started < 5


def test_failed_opens_are_retried_before_any_byte_is_read(
    http: str, http_server: RangeServer
) -> None:
    data = body_lines(100)
    http_server.objects["/objects/a.txt"] = data
    http_server.fail_next = 2
    with dio.stream(f"{http}/a.txt") as s:
        assert s.read_all() == data
    assert [m for m, *_ in http_server.requests] == ["GET"] * 3


def test_a_stream_with_a_bearer_token_sends_it_and_never_shows_it(
    stream_server: StreamServer,
) -> None:
    dio.configure_credentials("http", bearer_token="secret-token-123")
    stream_server.routes["/private"] = Script([b"ok"])
    assert dio.stream(f"{stream_server.url}/private").read_all() == b"ok"
    (_, _, headers), *_ = stream_server.requests
    assert headers["Authorization"] == "Bearer secret-token-123"
    with pytest.raises(NotFoundError) as info:
        dio.stream(f"{stream_server.url}/secret-token-123")
    assert "secret-token-123" not in str(info.value)


def test_https_streams_use_the_tls_roots_and_the_proxy_of_the_environment(
    network_env: pytest.MonkeyPatch,
    https_server: TLSRangeServer,
    authority: Authority,
    http_server: RangeServer,
) -> None:
    guarded = ProxyServer(auth=("alice", "pa:ss@word"))
    try:
        https_server.objects["/s.txt"] = b"over tls\n"
        http_server.objects["/p.txt"] = b"plain\n"
        url = f"{https_server.url}/s.txt"
        with pytest.raises(DataioError, match=r"s\.txt"):  # an unknown CA is refused
            dio.stream(url)
        proxy = f"http://alice:{quote('pa:ss@word', safe='')}@{guarded.url[len('http://') :]}"
        network_env.setenv("SSL_CERT_FILE", str(authority.ca_pem))
        network_env.setenv("HTTPS_PROXY", proxy)
        network_env.setenv("HTTP_PROXY", proxy)
        assert list(dio.stream(url).iter_lines()) == ["over tls"]
        assert dio.stream(f"{http_server.url}/p.txt").read_all() == b"plain\n"
        assert [(s.method, s.target) for s in guarded.seen] == [
            ("CONNECT", f"127.0.0.1:{https_server.server_address[1]}"),
            ("GET", f"{http_server.url}/p.txt"),
        ]
        assert {s.proxy_authorization for s in guarded.seen} == {guarded.expected}
    finally:
        guarded.stop()


def test_a_redirect_is_followed_without_the_bearer_token(
    stream_server: StreamServer, http_server: RangeServer
) -> None:
    dio.configure_credentials("http", bearer_token="secret-token-123")
    http_server.objects["/elsewhere/x.txt"] = b"moved\n"
    target = f"{http_server.url}/elsewhere/x.txt"
    stream_server.routes["/x.txt"] = Script([b""], status=302, headers={"Location": target})
    assert dio.stream(f"{stream_server.url}/x.txt").read_all() == b"moved\n"
    (_, _, first), *_ = stream_server.requests
    (_, _, second), *_ = http_server.requests
    assert first["Authorization"] == "Bearer secret-token-123"
    assert "Authorization" not in second
