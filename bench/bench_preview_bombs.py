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
import tempfile
import time
import zlib
from pathlib import Path

import requests
import zstandard

from bench.s3_env import archive_created, local_service, rss_mb

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


def main() -> None:
    files = _files()
    print("attack files:", ", ".join(f"{p} {len(b):,} B" for p, b in files.items()))
    with tempfile.TemporaryDirectory() as tmp, local_service(Path(tmp) / "var") as service:
        url, token, pid = service
        session = requests.Session()
        session.headers["Authorization"] = f"Token {token}"
        zarr_id = archive_created(session, url, "bombs.zarr")
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
        before = rss_mb(pid)
        print(f"service before: RSS {before[0]:.0f} MB, peak {before[1]:.0f} MB")
        for array in ("grid", "zstd", "zstd-streamed", "gzip"):
            for attempt in ("first", "again"):
                started = time.perf_counter()
                answer = anonymous.get(
                    f"{url}/archives/{zarr_id}/preview.png?array={array}", timeout=120
                )
                elapsed = time.perf_counter() - started
                rss, peak = rss_mb(pid)
                print(
                    f"  {array:14} {attempt:5} {answer.status_code} in {elapsed * 1000:7.1f} ms;"
                    f" RSS {rss:.0f} MB (+{rss - before[0]:.0f}), peak {peak:.0f} MB"
                    f" (+{peak - before[1]:.0f}):"
                    f" {answer.text[:90]!r}"
                )
