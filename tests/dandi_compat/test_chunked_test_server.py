"""The test server dandi 0.48.1 talks to takes chunked request bodies as gunicorn does: an empty
chunked PUT leaves nothing on the connection to break the next request (it did with Django's
own test server, a flaky 400 in test_dandi_048)."""

from __future__ import annotations

import http.client
import io
from urllib.parse import urlsplit

import pytest
from pytest_django.live_server_helper import LiveServer

from tests.support.chunked_server import ChunkedWSGIServer, read_chunked


def test_read_chunked_reads_to_the_end_of_the_body_and_no_further() -> None:
    stream = io.BytesIO(
        b"4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\nTrailer: x\r\n\r\nGET / HTTP/1.1\r\n"
    )
    assert read_chunked(stream) == b"Wikipedia"
    assert stream.read() == b"GET / HTTP/1.1\r\n"


@pytest.mark.live
def test_an_empty_chunked_request_does_not_break_the_next_one_on_its_connection(
    transactional_db: None,
) -> None:
    server = LiveServer("127.0.0.1:0", start=False)
    server.thread.server_class = ChunkedWSGIServer
    server.start()
    try:
        address = urlsplit(server.url)
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
        connection.putrequest("POST", "/api/info/")
        connection.putheader("Transfer-Encoding", "chunked")
        connection.endheaders()
        connection.send(b"0\r\n\r\n")
        first = connection.getresponse()
        first.read()
        assert first.status == 405  # /api/info/ takes GET only; the point is the next request
        connection.request("GET", "/api/info/")
        second = connection.getresponse()
        assert second.status == 200 and b"version" in second.read()
        connection.close()
    finally:
        server.stop()
