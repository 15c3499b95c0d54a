"""Storage that misbehaves: a real proxy in front of moto's S3 that fails requests on cue.

The service signs its URLs for the proxy (DANDIZARR_S3_PRESIGN_ENDPOINT_URL), as it would for
a public endpoint in front of a private one, so every PUT and GET of the client passes through.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from dandizarr.client import ClientError
from tests.support.live_client import Service

EXPIRED = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
    b"<Message>Request has expired</Message></Error>"
)
DROP = 0  # close the connection without an answer


class FlakyStorage:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        # Answers for the next PUTs, in order (a status, or DROP), before any is forwarded.
        self.put_failures: list[int] = []
        self.always_fail_puts: int | None = None
        self.get_failures: list[int] = []
        # Key suffixes whose first PUT is refused as expired.
        self.expire_first_put_of: set[str] = set()
        self.puts: list[str] = []
        self.failed_puts = 0
        self._lock = threading.Lock()
        self._session = requests.Session()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: bytes = b"") -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                key = self.path.split("?", 1)[0]
                with outer._lock:
                    outer.puts.append(key)
                    failure: int | None = None
                    if outer.put_failures:
                        failure = outer.put_failures.pop(0)
                    elif outer.always_fail_puts is not None:
                        failure = outer.always_fail_puts
                    else:
                        for suffix in list(outer.expire_first_put_of):
                            if key.endswith("/" + suffix):
                                outer.expire_first_put_of.discard(suffix)
                                failure = 403
                    if failure is not None:
                        outer.failed_puts += 1
                if failure == DROP:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if failure is not None:
                    self._answer(failure, EXPIRED if failure == 403 else b"try later")
                    return
                self._forward(body)

            def do_GET(self) -> None:
                with outer._lock:
                    failure = outer.get_failures.pop(0) if outer.get_failures else None
                if failure == DROP:
                    self.close_connection = True
                    self.connection.shutdown(2)
                elif failure is not None:
                    self._answer(failure, b"try later")
                else:
                    self._forward(None)

            def _forward(self, body: bytes | None) -> None:
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                response = outer._session.request(
                    self.command, outer.upstream + self.path, data=body, headers=headers,
                    timeout=60,
                )  # fmt: skip
                self.send_response(response.status_code)
                for name in ("ETag", "Content-Type"):
                    if name in response.headers:
                        self.send_header(name, response.headers[name])
                self.send_header("Content-Length", str(len(response.content)))
                self.end_headers()
                self.wfile.write(response.content)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._session.close()


@pytest.fixture
def flaky(service: Service, settings: Any) -> Iterator[FlakyStorage]:
    proxy = FlakyStorage(service.moto)
    settings.DANDIZARR_S3_PRESIGN_ENDPOINT_URL = proxy.url
    yield proxy
    proxy.close()


def test_transient_storage_errors_are_retried(
    service: Service, flaky: FlakyStorage, tree: tuple[Path, dict[str, str]]
) -> None:
    root, files = tree
    flaky.put_failures = [503, 500, 429, DROP, 502]
    with service.client() as client:
        result = client.upload(root, dandiset=service.dandiset)
    assert result.ok, result
    assert flaky.failed_puts == 5
    assert result.retries >= 5
    assert result.batch_restarts == 0
    assert result.uploaded_files == len(files) == len(service.remote_files(result.zarr_id))


def test_a_refused_url_is_replaced_by_starting_the_batch_again(
    service: Service, flaky: FlakyStorage, tree: tuple[Path, dict[str, str]]
) -> None:
    root, files = tree
    flaky.expire_first_put_of = {"zarr.json"}
    with service.client() as client:
        result = client.upload(root, dandiset=service.dandiset)
    assert result.ok, result
    assert flaky.failed_puts == 1 and result.batch_restarts == 1
    assert service.remote_files(result.zarr_id).keys() == files.keys()


def test_storage_that_keeps_failing_stops_the_upload_and_cancels_its_batch(
    service: Service, flaky: FlakyStorage, tree: tuple[Path, dict[str, str]]
) -> None:
    root, _ = tree
    flaky.always_fail_puts = 503
    with service.client() as client, pytest.raises(ClientError, match="kept failing"):
        client.upload(root, dandiset=service.dandiset, name="failing.zarr")
    with service.client() as client:
        archive = client.find_archive(service.dandiset, "failing.zarr")
        assert archive is not None
        assert not client.has_open_batch(archive.zarr_id)
        assert archive.file_count == 0
    assert not list(service.state_dir.glob("*.json"))
    # Once storage recovers, the same command finishes the job.
    flaky.always_fail_puts = None
    with service.client() as client:
        result = client.upload(root, dandiset=service.dandiset, name="failing.zarr")
    assert result.ok and result.zarr_id == archive.zarr_id


def test_download_through_flaky_storage_retries_and_verifies(
    service: Service, flaky: FlakyStorage, tree: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, files = tree
    with service.client() as client:
        uploaded = client.upload(root, dandiset=service.dandiset)
    flaky.get_failures = [503, DROP, 500]
    with service.client() as client:
        downloaded = client.download(uploaded.zarr_id, tmp_path / "copy")
    assert not flaky.get_failures and downloaded.retries >= 3
    assert downloaded.ok and downloaded.local_checksum == uploaded.server_checksum
    assert all((tmp_path / "copy" / p).read_bytes() == (root / p).read_bytes() for p in files)
