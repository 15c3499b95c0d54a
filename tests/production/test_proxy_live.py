"""The caching proxy in the production shape (docs/deploying.md, "The caching proxy"): nginx
(Debian's) configured by ``deploy/nginx.conf.template``, natively in front of gunicorn with the
production config (the web service's pool and the reads' own), PostgreSQL, Redis, SeaweedFS and
a Celery worker. A second read of a version's chunk (whole, a range, a HEAD, a revalidation)
reaches no service; a draft's change is never served stale through it; an answer to credentials
is never kept nor served from it; the reads go to the reads' pool and nothing else does."""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests

from dandizarr.client import DandizarrClient
from tests.support.ci import needs
from tests.support.processes import Processes
from tests.support.production import Production, production, tools_missing
from tests.support.proxy import NginxProxy, nginx_binary
from tests.support.seaweedfs import SeaweedS3

pytestmark = [
    needs(tools_missing(), f"missing {tools_missing()} (CI always runs this)"),
    needs(nginx_binary() is None, "nginx is not installed (CI installs it: .ci/run)"),
]

IMMUTABLE = "public, max-age=31536000, immutable"
# A file over one of the proxy's 1 MiB slices: a range of it is read a slice at a time.
BIG = 2_500_000


def _service_reads(deployment: Production) -> int:
    """How many ``/zarr/`` reads the web workers have answered (their metrics, gathered from
    every worker), asked of gunicorn itself, not through the proxy."""
    metrics = requests.get(f"{deployment.url}/metrics", timeout=30).text
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("django_http_requests_total_by_view_transport_method_total{") and (
            'view="zarr-read"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def _source(root: Path, changed: bytes = b"") -> dict[str, bytes]:
    files = {f"img/{i}": hashlib.sha256(b"%d" % i).digest() * (i + 1) for i in range(6)}
    files["big"] = bytes(range(256)) * (BIG // 256) + b"tail"
    if changed:
        files["img/3"] = changed
    for path, body in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(body)
    return files


def _get(session: requests.Session, url: str, **headers: str) -> requests.Response:
    response = session.get(url, headers=headers, timeout=60)
    assert response.status_code < 500, (url, response.status_code, response.text[:500])
    return response


@pytest.mark.timeout(600)
def test_a_versions_second_read_reaches_no_service_and_a_drafts_change_is_never_stale(
    processes: Processes, tmp_path: Path
) -> None:
    # processes: the production shape (tests.support.production) runs as processes.
    server_database_url = os.environ.get(
        "DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    s3 = SeaweedS3(tmp_path / "seaweedfs")
    try:
        with production(
            tmp_path / "deployment",
            server_database_url,
            s3,
            f"proxy-{uuid.uuid4().hex[:12]}",
            web_workers=1,
            read_web_workers=2,
            access_log=True,
            celery_workers=1,
            commands=[["ensure_bucket"]],
            # Every worker's request counts in one scrape (as docker-compose.yml's web has it).
            PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
            DANDIZARR_TLS_PROXY="1",
        ) as deployment:
            proxy = NginxProxy(
                tmp_path / "nginx",
                deployment.url.removeprefix("http://"),
                deployment.reads_url.removeprefix("http://"),
            )
            proxy.start()
            try:
                _through_the_proxy(deployment, proxy, tmp_path)
                _pools_apart(deployment)
            except BaseException:
                print(deployment.logs_tail())
                print(proxy.log.read_text()[-4000:])
                raise
            finally:
                proxy.stop()
    finally:
        s3.stop()


def _publish(client: DandizarrClient, dandiset: str, zarr_id: str) -> str:
    # The upload made the archive the draft's asset (at its name): publishing versions it.
    client.request("POST", f"/api/dandisets/{dandiset}/versions/draft/publish/", expect=(201,))
    versions: list[dict[str, Any]] = client.get_json(f"/api/zarr/{zarr_id}/versions/")["results"]
    return str(versions[-1]["zarr_id"])


def _through_the_proxy(deployment: Production, proxy: NginxProxy, tmp_path: Path) -> None:
    files = _source(tmp_path / "a.zarr")
    with DandizarrClient(proxy.url, deployment.token) as client:
        dandiset = client.create_dandiset("proxy")["identifier"]
        uploaded = client.upload(tmp_path / "a.zarr", dandiset=dandiset, name="a.zarr")
        assert uploaded.ok, uploaded.to_json()
        zarr_id = str(uploaded.zarr_id)
        version_id = _publish(client, dandiset, zarr_id)
    anonymous = requests.Session()

    # A version: the first read is the service's, every later one the proxy's alone.
    chunk = f"/zarr/{version_id}/img/3"
    first = _get(anonymous, proxy.url + chunk)
    assert (first.status_code, first.content) == (200, files["img/3"])
    assert first.headers["Cache-Control"] == IMMUTABLE
    etag = first.headers["ETag"]
    big = f"/zarr/{version_id}/big"
    assert (
        _get(anonymous, proxy.url + big, Range="bytes=2000000-2000009").content
        == (files["big"][2_000_000:2_000_010])
    )
    manifest = f"/api/zarr/{version_id}/manifest.json"
    kept_manifest = _get(anonymous, proxy.url + manifest).content
    before = _service_reads(deployment)
    again = _get(anonymous, proxy.url + chunk)
    assert (again.status_code, again.content, again.headers["X-Cache-Status"]) == (
        200,
        files["img/3"],
        "HIT",
    )
    part = _get(anonymous, proxy.url + chunk, Range="bytes=5-12")
    assert (part.status_code, part.content) == (206, files["img/3"][5:13])
    head = anonymous.head(proxy.url + chunk, timeout=60)
    assert (head.status_code, head.headers["Content-Length"]) == (200, str(len(files["img/3"])))
    revalidated = _get(anonymous, proxy.url + chunk, **{"If-None-Match": etag})
    assert (revalidated.status_code, revalidated.headers["X-Cache-Status"]) == (304, "HIT")
    assert "Content-Type" not in revalidated.headers
    big_again = _get(anonymous, proxy.url + big, Range="bytes=2000000-2000009")
    assert (big_again.content, big_again.headers["X-Cache-Status"]) == (
        files["big"][2_000_000:2_000_010],
        "HIT",
    )
    manifest_again = _get(anonymous, proxy.url + manifest)
    assert (manifest_again.content, manifest_again.headers["X-Cache-Status"]) == (
        kept_manifest,
        "HIT",
    )
    assert _service_reads(deployment) == before, "a cached version's read reached the service"
    assert proxy.cache_statuses(chunk)[0] == "MISS"

    # Credentials: never answered from the cache, never kept (the service answers each).
    token = {"Authorization": f"Token {deployment.token}"}
    for _ in range(2):
        mine = _get(anonymous, proxy.url + chunk, **token)
        assert mine.content == files["img/3"] and mine.headers["X-Cache-Status"] == "BYPASS"
        assert "private" in mine.headers["Cache-Control"]
    assert _service_reads(deployment) == before + 2

    # The draft: read through the proxy, changed by an upload batch, read again: new bytes.
    draft = f"/zarr/{zarr_id}/img/3"
    for _ in range(2):
        read = _get(anonymous, proxy.url + draft)
        assert read.content == files["img/3"] and read.headers["X-Cache-Status"] != "HIT"
        assert read.headers["Cache-Control"] == "no-cache"
    assert _get(anonymous, proxy.url + draft, Range="bytes=0-3").content == files["img/3"][:4]
    changed = _source(tmp_path / "a.zarr", changed=b"the draft's new bytes")
    with DandizarrClient(proxy.url, deployment.token) as client:
        overwritten = client.upload(tmp_path / "a.zarr", dandiset=dandiset, name="a.zarr")
        assert overwritten.ok and str(overwritten.zarr_id) == zarr_id, overwritten.to_json()
    assert _get(anonymous, proxy.url + draft).content == changed["img/3"]
    assert _get(anonymous, proxy.url + draft, Range="bytes=0-3").content == changed["img/3"][:4]
    # The version still reads its own bytes.
    assert _get(anonymous, proxy.url + chunk).content == files["img/3"]

    # An embargoed dandiset's archive: its owner's reads are never kept; a stranger's 404.
    with DandizarrClient(proxy.url, deployment.token) as client:
        private = client.request(
            "POST", "/api/dandisets/", json={"name": "private", "embargo": True}, expect=(201,)
        ).json()["identifier"]
        hidden = client.upload(tmp_path / "a.zarr", dandiset=private, name="p.zarr")
        assert hidden.ok, hidden.to_json()
    secret = f"/zarr/{hidden.zarr_id}/img/3"
    for _ in range(2):
        owner = _get(anonymous, proxy.url + secret, **token)
        assert owner.content == changed["img/3"] and owner.headers["X-Cache-Status"] != "HIT"
        assert owner.headers["Cache-Control"].startswith("private")
    assert _get(anonymous, proxy.url + secret).status_code == 404


def _pools_apart(deployment: Production) -> None:
    """Every read the proxy passed on went to the reads' pool, and nothing else did: a
    reader never waits in the web service's workers behind an upload."""

    def requests_in(log: str) -> list[str]:
        text = (deployment.directory / f"{log}.log").read_text()
        return re.findall(r'"([A-Z]+ \S+) HTTP/1\.[01]"', text)

    api = requests_in("gunicorn")
    # Without the start's readiness polls (asked of each pool, not through the proxy).
    reads = [r for r in requests_in("gunicorn-reads") if r != "GET /api/info/"]

    def read_route(request: str) -> bool:
        path = request.split(" ")[1].split("?")[0]
        return request.startswith(("GET /zarr/", "HEAD /zarr/")) or (
            request.startswith("GET /api/zarr/")
            and path.endswith(("/manifest/", "/manifest.json", "/files/", "/files"))
        )

    assert sum(1 for r in reads if r.startswith("GET /zarr/")) >= 5, reads
    assert any("/manifest.json" in r for r in reads), reads
    assert all(read_route(r) for r in reads), [r for r in reads if not read_route(r)]
    assert not [r for r in api if read_route(r)], [r for r in api if read_route(r)]
    assert any(r.startswith("POST /api/zarr/") and "/upload/" in r for r in api), api
