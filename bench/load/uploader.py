"""One uploader's process: ``python -m bench.load.uploader URL TOKEN``. Reads commands, one JSON
line each (``{"root", "dandiset", "name", "pack"}``), from standard input, uploads each with the
client library (``DandizarrClient.upload``) and writes JSON lines to standard output: one
``{"type": "request", ...}`` per request the client sent the service (each attempt, retries
included: a 5xx the client retried still counts) and one ``{"type": "result", ...}`` per
upload. Its own process because the client's transfer engine (libcurl) and threads block a
gevent loop, which Locust's users share; the Locust user that drives it turns the lines into
Locust request events (``bench.load.locustfile``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, TextIO

import requests

from bench.load.plan import route_class
from dandizarr.client import DandizarrClient


def _timed_sends(session: requests.Session, out: TextIO) -> None:
    """Every request ``session`` sends is written to ``out``: its route class, time from
    sending to the answer's last byte (``send`` reads the body unless streaming), status or
    error."""
    send = session.send

    def timed_send(request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        method = request.method or "GET"
        path = requests.utils.urlparse(request.url or "").path
        started = time.perf_counter()
        line: dict[str, Any] = {"type": "request", "name": route_class(method, path)}
        line["method"] = method
        try:
            response = send(request, **kwargs)
        except Exception as error:
            line.update(ms=(time.perf_counter() - started) * 1000, error=repr(error)[:300])
            out.write(json.dumps(line) + "\n")
            out.flush()
            raise
        line.update(
            ms=(time.perf_counter() - started) * 1000,
            status=response.status_code,
            length=int(response.headers.get("Content-Length") or 0),
        )
        out.write(json.dumps(line) + "\n")
        out.flush()
        return response

    session.send = timed_send  # type: ignore[method-assign]


def main(url: str, token: str) -> None:
    # The protocol owns standard output; anything the client prints goes to standard error.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    with DandizarrClient(url, token, jobs=8) as client:
        _timed_sends(client.api_session, out)
        for command_line in sys.stdin:
            command = json.loads(command_line)
            started = time.perf_counter()
            result: dict[str, Any] = {"type": "result", "pack": command["pack"]}
            try:
                uploaded = client.upload(
                    command["root"],
                    dandiset=command["dandiset"],
                    name=command["name"],
                    pack=command["pack"],
                )
                result.update(
                    ok=uploaded.ok,
                    zarr_id=uploaded.zarr_id,
                    files=uploaded.uploaded_files,
                    local_checksum=uploaded.local_checksum,
                    expected_checksum=uploaded.expected_checksum,
                    server_checksum=uploaded.server_checksum,
                )
            except Exception as error:
                result.update(ok=False, error=repr(error)[:1000])
            result["ms"] = (time.perf_counter() - started) * 1000
            out.write(json.dumps(result) + "\n")
            out.flush()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
