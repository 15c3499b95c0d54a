"""The preview attacks of the security review, against ``dandizarr serve`` (a process): a
300-byte ``zarr.json`` declaring a 2048 x 2048 grid of 1 x 1 chunks, and a 64 x 64 array whose
one chunk decompresses to 1 GiB (zstd, its size declared; zstd streamed; gzip). Each preview
is asked for twice (the second is the cached refusal). Printed: each answer's status and
time, and the service worker's resident memory before and after (peak, VmHWM).

Target (issue: "safe to open to strangers"): each under a second, RSS growth under 100 MB.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
import time
import zlib
from pathlib import Path

import requests
import zstandard

from tests.support.processes import serve_process

BOMB = 1 << 30


def _zeros(total: int, block: int = 4 << 20):  # type: ignore[no-untyped-def]
    for _ in range(total // block):
        yield bytes(block)


def _gzip() -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join(compressor.compress(b) for b in _zeros(BOMB)) + compressor.flush()


def _zstd(declared: bool) -> bytes:
    chunker = zstandard.ZstdCompressor(level=3, write_content_size=declared).chunker(
        size=BOMB if declared else -1
    )
    out = [piece for block in _zeros(BOMB) for piece in chunker.compress(block)]
    return b"".join(out + list(chunker.finish()))


def _v2(compressor: dict[str, object]) -> bytes:
    return json.dumps(
        {
            "zarr_format": 2, "shape": [64, 64], "chunks": [64, 64], "dtype": "|u1",
            "compressor": compressor, "fill_value": 0, "order": "C", "filters": None,
        }
    ).encode()  # fmt: skip


def _files() -> dict[str, bytes]:
    grid = {
        "zarr_format": 3, "node_type": "array", "shape": [2048, 2048], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, 1]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}],
    }  # fmt: skip
    return {
        "grid/zarr.json": json.dumps(grid).encode(),
        "zstd/.zarray": _v2({"id": "zstd", "level": 3}),
        "zstd/0.0": _zstd(declared=True),
        "zstd-streamed/.zarray": _v2({"id": "zstd", "level": 3}),
        "zstd-streamed/0.0": _zstd(declared=False),
        "gzip/.zarray": _v2({"id": "gzip", "level": 9}),
        "gzip/0.0": _gzip(),
    }


def _worker_memory(port: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in MB of the serve process on ``port`` that holds the most memory."""
    best = (0, 0)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if f"DANDIZARR_PORT={port}".encode() not in environ:
                continue
            status = dict(
                line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            )
        except OSError:
            continue
        rss, hwm = (int(status[k].split()[0]) // 1024 for k in ("VmRSS", "VmHWM"))
        best = max(best, (rss, hwm))
    return best


def main() -> None:
    files = _files()
    print("attack files:", ", ".join(f"{p} {len(b):,} B" for p, b in files.items()))
    with tempfile.TemporaryDirectory() as tmp, serve_process(Path(tmp) / "var") as (url, token):
        port = int(url.rsplit(":", 1)[1])
        session = requests.Session()
        session.headers["Authorization"] = f"Token {token}"
        dandiset = session.post(f"{url}/api/dandisets/", json={"name": "bombs"}, timeout=30)
        zarr_id = session.post(
            f"{url}/api/zarr/",
            json={"name": "bombs.zarr", "dandiset": dandiset.json()["identifier"]},
            timeout=30,
        ).json()["zarr_id"]
        targets = session.post(
            f"{url}/api/zarr/{zarr_id}/upload/",
            json=[{"path": p, "etag": hashlib.md5(b).hexdigest()} for p, b in files.items()],
            timeout=60,
        ).json()
        for target in targets:
            body = files[target["path"]]
            md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
            requests.put(
                target["upload_url"], data=body, headers={"Content-MD5": md5}, timeout=60
            ).raise_for_status()
        session.post(f"{url}/api/zarr/{zarr_id}/upload/complete/", timeout=60).raise_for_status()
        anonymous = requests.Session()
        anonymous.get(f"{url}/archives/{zarr_id}/", timeout=60).raise_for_status()
        before = _worker_memory(port)
        print(f"service worker before: RSS {before[0]} MB, peak {before[1]} MB")
        for array in ("grid", "zstd", "zstd-streamed", "gzip"):
            for attempt in ("first", "again"):
                started = time.perf_counter()
                answer = anonymous.get(
                    f"{url}/archives/{zarr_id}/preview.png?array={array}", timeout=120
                )
                elapsed = time.perf_counter() - started
                rss, peak = _worker_memory(port)
                print(
                    f"  {array:14} {attempt:5} {answer.status_code} in {elapsed * 1000:7.1f} ms;"
                    f" RSS {rss} MB (+{rss - before[0]}), peak {peak} MB (+{peak - before[1]}):"
                    f" {answer.text[:90]!r}"
                )
