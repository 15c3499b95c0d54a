"""What a stranger's heavy OME-Zarr archive costs the service (issue #35, finding 2), against
``dandizarr serve`` as a process: 61 image groups, each with an 870 KB ``.zattrs`` declaring
8,000 channels (53 MB of metadata), written straight to the server's storage directory.

Printed: the OME summary (``/api/zarr/{id}/ome/``) asked once, cold, by an anonymous client
(its wall time and the service's CPU-seconds); then, on a second archive of the same content
(cold again), four identical anonymous requests at once while a bystander asks
``/api/info/`` in a loop: each of the four's time, the service's CPU-seconds, the bystander's
median latency against its idle median, and the service's RSS before and after.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import requests

from bench.s3_env import _pids_of, archive_created, cpu_seconds, rss_mb
from dandizarr.checksums import DirectoryEntry, DirectoryListing, FileEntry, encode_checksum_file
from dandizarr.objectstore.local import LocalObjectStore
from dandizarr_server.zarr_api.domain.keys import checksum_key, file_key
from tests.support.processes import serve_process

IMAGES = 61
CHANNELS = 8_000


def _attrs(name: str) -> bytes:
    axes = [{"name": "c", "type": "channel"}] + [
        {"name": n, "type": "space", "unit": "micrometer"} for n in "yx"
    ]
    transforms = [{"type": "scale", "scale": [1.0, 0.5, 0.5]}]
    channels = [
        {
            "label": f"{name} channel {i}",
            "color": "00FF00",
            "window": {"start": 0, "end": 1000, "min": 0, "max": 4095},
        }
        for i in range(CHANNELS)
    ]
    doc = {
        "multiscales": [
            {
                "version": "0.4",
                "name": name,
                "axes": axes,
                "datasets": [{"path": "0", "coordinateTransformations": transforms}],
            }
        ],
        "omero": {"channels": channels},
    }
    return json.dumps(doc).encode()


LEVEL = json.dumps(
    {
        "zarr_format": 2, "shape": [CHANNELS, 64, 64], "chunks": [1, 64, 64], "dtype": "<u2",
        "compressor": None, "fill_value": 0, "filters": None, "order": "C",
    }
).encode()  # fmt: skip


def build(storage: Path, zarr_id: str) -> int:
    """The archive's documents and listings in the local storage directory; its bytes."""
    store = LocalObjectStore(storage, public_url="http://unused", secret_key="unused")
    files: dict[str, bytes] = {".zgroup": b'{"zarr_format": 2}'}
    for i in range(IMAGES):
        files[f"image{i}/.zgroup"] = b'{"zarr_format": 2}'
        files[f"image{i}/.zattrs"] = _attrs(f"image{i}")
        files[f"image{i}/0/.zarray"] = LEVEL
    listings: dict[str, DirectoryListing] = {}
    for path, body in files.items():
        store.put(file_key(zarr_id, path), body)
        directory, _, name = path.rpartition("/")
        listing = listings.setdefault(directory, DirectoryListing())
        listing.set_file(FileEntry(name, hashlib.md5(body).hexdigest(), len(body)))
    # Parents from the deepest up: each names its children's summaries.
    for directory in sorted(listings, key=lambda d: -d.count("/") if d else 1):
        if not directory:
            continue
        parent, _, name = directory.rpartition("/")
        digest, _, size = listings[directory].summary()
        listings.setdefault(parent, DirectoryListing()).set_directory(
            DirectoryEntry(name, digest, size)
        )
    for directory, listing in listings.items():
        path = storage / checksum_key(zarr_id, directory)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_checksum_file(listing))
    return sum(map(len, files.values()))


def _archive(session: requests.Session, url: str, storage: Path, name: str) -> str:
    zarr_id = archive_created(session, url, name)
    build(storage, zarr_id)
    return zarr_id


def _get(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    response = requests.get(url, timeout=600)
    return time.perf_counter() - started, response.status_code


def _bystander(url: str, stop: threading.Event, out: list[float]) -> None:
    session = requests.Session()
    while not stop.is_set():
        started = time.perf_counter()
        session.get(url, timeout=60)
        out.append(time.perf_counter() - started)
        time.sleep(0.02)


def _idle_latency(url: str) -> float:
    session = requests.Session()
    times = []
    for _ in range(50):
        started = time.perf_counter()
        session.get(url, timeout=60)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, serve_process(Path(tmp) / "var") as (url, token):
        storage = Path(tmp) / "var" / "storage"
        session = requests.Session()
        session.headers["Authorization"] = f"Token {token}"
        # Public dandisets: the summary is asked anonymously, as a stranger would.
        first = _archive(session, url, storage, "heavy-1.ome.zarr")
        pids = _pids_of(url)
        size = sum(p.stat().st_size for p in storage.rglob(".zattrs"))
        print(f"{IMAGES} images, {CHANNELS:,} channels each, {size / 1e6:.1f} MB of .zattrs")
        before_cpu = cpu_seconds(pids)
        seconds, status = _get(f"{url}/api/zarr/{first}/ome/")
        print(
            f"  one cold OME summary: {seconds:.2f} s wall, "
            f"{cpu_seconds(pids) - before_cpu:.2f} service CPU-s (HTTP {status})"
        )
        info = f"{url}/api/info/"
        idle = _idle_latency(info)
        second = _archive(session, url, storage, "heavy-2.ome.zarr")
        rss_before = max(rss_mb(pid)[0] for pid in pids)
        stop, bystander = threading.Event(), []
        watcher = threading.Thread(target=_bystander, args=(info, stop, bystander))
        watcher.start()
        results: list[tuple[float, int]] = []
        before_cpu = cpu_seconds(pids)
        askers = [
            threading.Thread(target=lambda: results.append(_get(f"{url}/api/zarr/{second}/ome/")))
            for _ in range(4)
        ]
        for thread in askers:
            thread.start()
        for thread in askers:
            thread.join()
        used = cpu_seconds(pids) - before_cpu
        stop.set()
        watcher.join()
        rss_after = max(rss_mb(pid)[1] for pid in pids)
        times: Any = ", ".join(f"{s:.2f} s ({status})" for s, status in sorted(results))
        print(f"  4 concurrent identical cold summaries: {times}; {used:.2f} service CPU-s")
        print(
            f"  bystander /api/info/: median {statistics.median(bystander) * 1000:.0f} ms "
            f"during, {idle * 1000:.0f} ms idle ({len(bystander)} requests)"
        )
        print(f"  service RSS: {rss_before:.0f} MB before, peak {rss_after:.0f} MB")
