"""The real ``dandi`` CLI against a live service: each release in its venv (``make test``
builds them), Django's test server in a thread (test PostgreSQL database), Celery inline, S3 on
SeaweedFS (which enforces signed headers as S3 does) or the local backend."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.chunked_server import ChunkedWSGIServer
from tests.support.dandi import PORT_8000_GROUP, DandiService, configure_storage, make_service
from tests.support.processes import Processes, listening


@pytest.fixture(params=["seaweedfs", "local"])
def dandi_service(
    request: pytest.FixtureRequest,
    live_server: Any,
    transactional_db: None,
    settings: Any,
    tmp_path: Path,
) -> Iterator[DandiService]:
    """The service at pytest-django's live server, for the newest dandi."""
    configure_storage(settings, request.param, live_server.url, tmp_path, request)
    yield make_service(live_server.url, tmp_path)


@pytest.fixture(params=["seaweedfs", "local"])
def dandi_service_8000(
    processes: Processes,
    request: pytest.FixtureRequest,
    transactional_db: None,
    settings: Any,
    tmp_path: Path,
) -> Iterator[DandiService]:
    """The service on 127.0.0.1:8000, the one address dandi 0.48.1's test instance
    (``dandi-api-local-docker-tests``) knows, advertising its schema version (0.6.3). The tests
    run the dandi CLI: processes."""
    import socket

    from pytest_django.live_server_helper import LiveServer

    # An xdist worker's option (its own `dist` is "no" there).
    loadgroup = getattr(request.config.option, "loadgroup", False)
    if loadgroup and not request.node.nodeid.endswith(f"@{PORT_8000_GROUP}"):
        # pytest 9.2 with pytest-xdist 3.8 lost the group (pyproject.toml pins pytest below it):
        # the tests would race for the port on several workers, one waiting out the other.
        pytest.fail(
            f"--dist loadgroup did not keep this test in xdist_group {PORT_8000_GROUP}",
            pytrace=False,
        )
    deadline = time.monotonic() + 90  # a previous run's connections may linger in TIME_WAIT
    while True:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", 8000))
                break
            except OSError as error:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"port 8000 is busy ({error}): dandi 0.48.1 only reaches its test "
                        "instance at http://127.0.0.1:8000/api; stop whatever listens there "
                        f"(make serve?): {listening(8000) or 'ss names no listener'}"
                    )
        time.sleep(1)
    server = LiveServer("127.0.0.1:8000", start=False)
    server.thread.server_class = ChunkedWSGIServer  # dandi 0.48.1 sends empty files chunked
    server.start()
    try:
        settings.DANDIZARR_DANDI_SCHEMA_VERSION = "0.6.3"
        configure_storage(settings, request.param, server.url, tmp_path, request)
        yield make_service(server.url, tmp_path)
    finally:
        server.stop()
