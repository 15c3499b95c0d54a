"""Issue #47's findings as requests against a live service: the documents that broke the
readers, and each attack a probe that sends it and is measured from outside (the server's CPU
read from /proc, its answer's size, what it wrote to its log).

Used by the live hostile walk (tests/production/test_hostile_walk_live.py), on
``dandizarr serve`` with console logs and in the production shape.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from dandizarr.objectstore.multipart import part_count, part_size

# Findings 1, 2 and 6: documents of at most a megabyte that the readers could not take.


def _v3(data_type: str, fill_value: Any, codecs: Any = None) -> dict[str, Any]:
    return {
        "zarr_format": 3, "node_type": "array", "shape": [16, 16], "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 8]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": fill_value,
        "codecs": codecs or [{"name": "bytes", "configuration": {"endian": "little"}}],
    }  # fmt: skip


def _v2(dtype: str, fill_value: Any, filters: Any = None) -> dict[str, Any]:
    return {
        "zarr_format": 2, "shape": [16, 16], "chunks": [8, 8], "dtype": dtype,
        "compressor": None, "fill_value": fill_value, "order": "C", "filters": filters,
    }  # fmt: skip


def nested_sharding(depth: int) -> dict[str, Any]:
    """A v3 array whose codecs nest ``sharding_indexed`` ``depth`` deep (about 1 KB at 300)."""
    codecs: list[Any] = [{"name": "bytes"}]
    for _ in range(depth):
        codecs = [
            {"name": "sharding_indexed", "configuration": {"chunk_shape": [8, 8], "codecs": codecs}}
        ]
    return _v3("uint8", 0, codecs)


def _dump(document: dict[str, Any]) -> bytes:
    # allow_nan: Infinity as JSON's readers (Python's, zarr-python's) take it.
    return json.dumps(document, allow_nan=True).encode()


FINDING_DOCUMENTS: dict[str, bytes] = {
    ".zgroup": b'{"zarr_format": 2}',
    "nest300/zarr.json": _dump(nested_sharding(300)),
    "inf_int_v3/zarr.json": _dump(_v3("int32", float("inf"))),
    "inf_int_v2/.zarray": _dump(_v2("<i4", float("inf"))),
    "huge_float32/zarr.json": _dump(_v3("float32", 10**400)),
    "huge_float32_v2/.zarray": _dump(_v2("<f4", 10**400)),
    "bad_hex_float/zarr.json": _dump(_v3("float64", "0x")),
    "huge_complex/zarr.json": _dump(_v3("complex64", [10**400, 0])),
    "filters80k/.zarray": _dump(_v2("|u1", 0, [{"id": "x"}] * 80_000)),
}
METADATA_ARRAYS = sorted({p.rpartition("/")[0] for p in FINDING_DOCUMENTS if "/" in p})
assert len(FINDING_DOCUMENTS["filters80k/.zarray"]) < 1 << 20
assert len(FINDING_DOCUMENTS["nest300/zarr.json"]) < 30 << 10

HUGE = 30 << 20  # finding 5: a 30 MB path or shard name
TIB = 1 << 40


@dataclass
class Target:
    """A live service and what the walk set up there: a loose archive holding the documents,
    a sharded one, and a signed-in user who owns nothing but their own dandiset."""

    url: str
    token: str
    dandiset: str
    loose: str = ""
    sharded: str = ""
    part_bytes: int = 64 << 20

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Token {self.token}", **kwargs.pop("headers", {})}
        return requests.request(
            method, self.url + path, headers=headers, timeout=kwargs.pop("timeout", 600), **kwargs
        )


def archive_create(target: Target, name: str, layout: str) -> str:
    response = target.api(
        "POST", "/api/zarr/", json={"name": name, "dandiset": target.dandiset, "layout": layout}
    )
    assert response.status_code == 201, response.text[:500]
    return str(response.json()["zarr_id"])


def archive_upload(target: Target, zarr_id: str, files: dict[str, bytes]) -> None:
    """One batch of ``files`` through the API as any client sends it, then its tree applied."""
    md5s = {path: hashlib.md5(data).hexdigest() for path, data in files.items()}
    started = target.api(
        "POST",
        f"/api/zarr/{zarr_id}/upload/",
        json=[{"path": path, "etag": md5} for path, md5 in md5s.items()],
    )
    assert started.status_code == 200, started.text[:500]
    for item in started.json():
        digest = bytes.fromhex(md5s[item["path"]])
        put = requests.put(
            item["upload_url"],
            data=files[item["path"]],
            headers={"Content-MD5": base64.b64encode(digest).decode()},
            timeout=60,
        )
        assert put.status_code == 200, put.text[:500]
    done = target.api("POST", f"/api/zarr/{zarr_id}/upload/complete/")
    assert done.status_code == 200, done.text[:500]
    deadline = time.monotonic() + 60
    while target.api("GET", f"/api/zarr/{zarr_id}/").json()["checksum_status"] != "complete":
        assert time.monotonic() < deadline, "the tree update did not finish"
        time.sleep(0.2)


@dataclass(frozen=True)
class Probe:
    finding: str
    name: str
    send: Callable[[Target], requests.Response]
    # The largest answer it may get (the page of 80,000 filters is a page: more than a 400).
    max_answer: int = 16 << 10


def _metadata_probes() -> Iterator[Probe]:
    for array in METADATA_ARRAYS:
        finding = "6" if array == "filters80k" else "1" if array == "nest300" else "2"
        yield Probe(
            finding,
            f"preview {array}",
            lambda t, a=array: requests.get(
                f"{t.url}/archives/{t.loose}/preview.png?array={a}", timeout=600
            ),
            max_answer=256 << 10,
        )
    yield Probe(
        "1,2,6",
        "archive page",
        lambda t: requests.get(f"{t.url}/archives/{t.loose}/", timeout=600),
        max_answer=256 << 10,
    )
    yield Probe(
        "1,2,6",
        "OME summary",
        lambda t: requests.get(f"{t.url}/api/zarr/{t.loose}/ome/", timeout=600),
        max_answer=256 << 10,
    )


def _big_files_start(target: Target) -> requests.Response:
    """Finding 3: 85 files of 5 TiB, each with every part's md5 declared."""
    size = 5 * TIB
    parts = part_count(size, part_size(size, target.part_bytes))
    md5 = "0" * 32
    files = [
        {"path": f"big/{i}", "etag": md5, "size": size, "parts": [md5] * parts} for i in range(85)
    ]
    response = target.api("POST", f"/api/zarr/{target.loose}/upload/", json=files)
    if response.status_code == 200:  # an open batch: cancelled, so the walk can go on
        target.api("DELETE", f"/api/zarr/{target.loose}/upload/")
    return response


def _pack_start(target: Target, name: Any, path: Any) -> requests.Response:
    body = {
        "shards": [
            {
                "name": name,
                "etag": "0" * 32,
                "size": 1,
                "members": [{"path": path, "md5": "0" * 32, "size": 1, "offset": 0}],
            }
        ]
    }
    return target.api("POST", f"/api/zarr/{target.sharded}/upload/", json=body)


def nested_path_pack_start(target: Target) -> requests.Response:
    """Finding 4: a member path that is a JSON list nested 990 deep (2 KB)."""
    nested = b"[" * 990 + b"]" * 990
    body = (
        b'{"shards": [{"name": "s0", "etag": "' + b"0" * 32 + b'", "size": 1, "members": '
        b'[{"path": ' + nested + b', "md5": "' + b"0" * 32 + b'", "size": 1, "offset": 0}]}]}'
    )
    return target.api(
        "POST",
        f"/api/zarr/{target.sharded}/upload/",
        data=body,
        headers={"Content-Type": "application/json"},
    )


def _huge_path_probes() -> Iterator[Probe]:
    path = "a" * HUGE
    md5 = "0" * 32
    yield Probe(
        "5",
        "upload/ with a 30 MB path",
        lambda t: t.api("POST", f"/api/zarr/{t.loose}/upload/", json=[{"path": path, "etag": md5}]),
    )
    yield Probe(
        "5",
        "DANDI files/ POST with a 30 MB path",
        lambda t: t.api(
            "POST",
            f"/api/zarr/{t.loose}/files/",
            json=[{"path": path, "base64md5": base64.b64encode(bytes(16)).decode()}],
        ),
    )
    yield Probe(
        "5",
        "DELETE files/ with a 30 MB path",
        lambda t: t.api("DELETE", f"/api/zarr/{t.loose}/files/", json=[{"path": path}]),
    )
    yield Probe("5", "pack start with a 30 MB shard name", lambda t: _pack_start(t, path, "c/0"))
    # What is not a string, refused: a path that is a list of 5,000,000 items (10 MB of JSON),
    # a path that is a number no float holds, a pack start's 25,000 refused member paths.
    yield Probe(
        "5",
        "upload/ with a path that is a 5M-item list",
        lambda t: _raw_json(t, "POST", f"/api/zarr/{t.loose}/upload/", _LIST_PATH_BODY),
    )
    yield Probe(
        "5",
        "DELETE files/ with a path of 1e400",
        lambda t: _raw_json(t, "DELETE", f"/api/zarr/{t.loose}/files/", b'[{"path": 1e400}]'),
    )
    yield Probe("5", "pack start with 25,000 refused members", _many_refused_members)


_LIST_PATH_BODY = b'[{"path": [0' + b",0" * (5_000_000 - 1) + b'], "etag": "' + b"0" * 32 + b'"}]'


def _raw_json(target: Target, method: str, path: str, body: bytes) -> requests.Response:
    return target.api(method, path, data=body, headers={"Content-Type": "application/json"})


def _many_refused_members(target: Target) -> requests.Response:
    """25,000 member paths of 1,000 characters, each refused (a trailing '/'): every one was
    named in the 400, a 27 MB answer."""
    members = [
        {"path": f"{i:05d}" + "a" * 1000 + "/", "md5": "0" * 32, "size": 1, "offset": 0}
        for i in range(25_000)
    ]
    body = {"shards": [{"name": "s0", "etag": "0" * 32, "size": 1, "members": members}]}
    return target.api("POST", f"/api/zarr/{target.sharded}/upload/", json=body)


def unknown_host(target: Target) -> requests.Response:
    return requests.get(f"{target.url}/healthz", headers={"Host": "attacker.example"}, timeout=60)


def probes() -> list[Probe]:
    return [
        *_metadata_probes(),
        Probe("3", "batch start: 85 files of 5 TiB", _big_files_start),
        Probe("4", "pack start: a member path nested 990 deep", nested_path_pack_start),
        *_huge_path_probes(),
        Probe("7", "unknown Host header", unknown_host),
    ]


def process_tree_cpu(pid: int) -> float:
    """CPU seconds (user and system) of process ``pid`` and every process below it, alive now."""
    ticks = 100.0  # os.sysconf("SC_CLK_TCK") on Linux
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        pending += [int(c) for c in children]
    return total


@dataclass
class Measured:
    probe: Probe
    status: int
    answer_bytes: int
    cpu_seconds: float
    log_bytes: int
    log_text: str
    healthz_seconds: float


def log_size(logs: list[Path]) -> int:
    return sum(log.stat().st_size for log in logs if log.exists())


def measure(
    target: Target, probe: Probe, server_pid: int, logs: list[Path], *, settle: float = 0.3
) -> Measured:
    """Send ``probe`` once; the server's CPU and log growth over it (after ``settle`` seconds
    for what the answer left behind), and how long ``/healthz`` then takes."""
    log_before = log_size(logs)
    cpu_before = process_tree_cpu(server_pid)
    response = probe.send(target)
    answer = len(response.content)
    time.sleep(settle)
    cpu = process_tree_cpu(server_pid) - cpu_before
    started = time.monotonic()
    try:
        healthy = requests.get(f"{target.url}/healthz", timeout=10).status_code == 200
    except requests.RequestException:
        healthy = False
    healthz = time.monotonic() - started if healthy else float("inf")
    grown = log_size(logs) - log_before
    text = ""
    for log in logs:
        if log.exists():
            with open(log, "rb") as f:
                f.seek(max(0, log.stat().st_size - min(grown, 1 << 20)))
                text += f.read().decode(errors="replace")
    return Measured(probe, response.status_code, answer, cpu, grown, text, healthz)


def table(shape: str, rows: list[Measured]) -> str:
    lines = [
        f"hostile walk on {shape}:",
        f"{'finding':<8} {'probe':<45} {'status':>6} {'answer B':>11} {'CPU s':>7} "
        f"{'log B':>9} {'healthz s':>9}",
    ]
    for row in rows:
        lines.append(
            f"{row.probe.finding:<8} {row.probe.name:<45} {row.status:>6} {row.answer_bytes:>11,} "
            f"{row.cpu_seconds:>7.2f} {row.log_bytes:>9,} {row.healthz_seconds:>9.3f}"
        )
    return "\n".join(lines)
