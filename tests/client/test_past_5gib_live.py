"""One file past S3's 5 GiB single PUT, end to end in the production shape (issue #40): the
``dandizarr`` CLI against ``dandizarr serve`` on SeaweedFS with the production threshold and
part size (no setting changed), killed after some parts and run again.

6 GiB: the smallest whole GiB past S3's 5 GiB single-PUT limit, so that only parts can carry
it (96 parts of 64 MiB at the defaults), and past the 4 GiB mark where a 32-bit size or offset
would wrap. Cheap to make: a sparse file with its offset stamped every MiB (6,144 writes of
16 bytes; reading it is mostly the kernel's zero pages), so every part and every MiB of it has
bytes of its own and a part sent to the wrong place, or a MiB lost, changes its md5. (SeaweedFS
stores its zero runs compressed: about 70 MB on disk; the download is 6 GiB.)

Marked ``big`` (about 5 minutes and 250 CPU-seconds, 6 GB of disk while it runs, deleted after):
``make test-big`` runs it, ``make test`` and ``make test-fast`` do not (tests/conftest.py).
Its time, phase by phase: docs/testing.md.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from dandizarr.objectstore.multipart import MAX_SINGLE_PUT, composite_etag, part_count, part_size
from tests.support.live_client import make_tree
from tests.support.processes import Processes
from tests.support.seaweedfs import ACCESS_KEY, REGION, SECRET_KEY, SeaweedS3

# Minutes on a loaded 2-core machine (docs/testing.md), past the suite's 300 s per test.
pytestmark = [pytest.mark.big, pytest.mark.timeout(1800)]

CLI = str(Path(sys.executable).parent / "dandizarr")
MIB = 1 << 20
SIZE = 6 << 30
BIG = "0/c/0/0"  # a shard of array 0, as a sharded Zarr v3 names it
JOBS = 4  # parts in flight: what a kill loses is at most this many parts
KILL_AFTER = 8  # parts the journal records before the client is killed
STAMP = 16


def write_sparse(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.truncate(SIZE)
        for offset in range(0, SIZE, MIB):
            handle.seek(offset)
            handle.write(offset.to_bytes(STAMP // 2, "big") * 2)


def stamps_intact(path: Path) -> bool:
    """The file has the size and, at every MiB, the stamp ``write_sparse`` put there (read
    with plain preads: no code of ours)."""
    if path.stat().st_size != SIZE:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        return all(
            os.pread(fd, STAMP, offset) == offset.to_bytes(STAMP // 2, "big") * 2
            for offset in range(0, SIZE, MIB)
        )
    finally:
        os.close(fd)


@pytest.fixture
def work() -> Iterator[Path]:
    """A directory on the disk (not pytest's tmp_path, which keeps its last runs: 13 GB here),
    removed afterwards whatever happened."""
    base = Path(os.environ.get("DANDIZARR_BIG_TEST_DIR") or os.environ.get("TMPDIR") or "/tmp")
    directory = base / f"dandizarr-big-{os.getpid()}"
    directory.mkdir(parents=True)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _s3_env() -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": REGION,
    }


def test_a_6_gib_file_uploads_in_parts_resumes_and_downloads(
    processes: Processes, work: Path
) -> None:
    source = work / "big.zarr"
    make_tree(source, 12, seed=40, size=4096)
    write_sparse(source / BIG)
    seaweedfs = SeaweedS3(work / "seaweedfs")
    seaweedfs.start()
    try:
        bucket = seaweedfs.create_bucket("big")
        with processes.serve(
            work / "var",
            DANDIZARR_STORAGE="s3",
            DANDIZARR_S3_ENDPOINT_URL=seaweedfs.endpoint_url,
            DANDIZARR_S3_BUCKET=bucket,
            **_s3_env(),
        ) as (url, token):
            _upload_kill_resume_download(processes, work, source, seaweedfs, bucket, url, token)
    finally:
        seaweedfs.stop()


def _upload_kill_resume_download(
    processes: Processes,
    work: Path,
    source: Path,
    seaweedfs: SeaweedS3,
    bucket: str,
    url: str,
    token: str,
) -> None:
    headers = {"Authorization": f"Token {token}"}
    info = requests.get(f"{url}/api/info/", timeout=30).json()
    threshold, part_bytes = info["multipart_threshold_bytes"], info["multipart_part_bytes"]
    assert threshold is not None and threshold < MAX_SINGLE_PUT < SIZE
    parts = part_count(SIZE, part_size(SIZE, part_bytes))
    dandiset = requests.post(
        f"{url}/api/dandisets/", json={"name": "big"}, headers=headers, timeout=30
    ).json()["identifier"]
    env = {
        **os.environ,
        "DANDIZARR_URL": url,
        "DANDIZARR_TOKEN": token,
        "DANDIZARR_STATE_DIR": str(work / "state"),
    }

    started = time.monotonic()

    def phase(name: str) -> None:
        # Where the test's minutes go, for docs/testing.md (printed under -s; nothing asserted).
        nonlocal started
        print(f"{name}: {time.monotonic() - started:.1f} s", flush=True)
        started = time.monotonic()

    def cli(*args: str) -> dict[str, Any]:
        done = processes.run(
            [CLI, *args, "--no-progress", "--json", "-j", str(JOBS)],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-3000:]}"
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    # The first run, killed (SIGKILL: nothing of it runs after) once the journal holds
    # KILL_AFTER parts.
    log = open(work / "first-run.log", "w")  # noqa: SIM115 (closed below)
    first = processes.start(
        [CLI, "upload", str(source), "--dandiset", dandiset, "--no-progress", "-j", str(JOBS)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    journal: Path | None = None
    deadline = time.monotonic() + 1800
    while True:
        assert first.poll() is None, (work / "first-run.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "the journal never held enough parts"
        journal = next((work / "state").glob("*.parts.jsonl"), None)
        if journal is not None and len(journal.read_text().splitlines()) > KILL_AFTER:
            break
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    first.wait()
    log.close()
    phase("first run (hashing, small files, parts) until killed")
    lines = journal.read_text().splitlines()
    [declared] = json.loads(lines[0])["files"]
    assert (declared["path"], declared["size"], len(declared["parts"])) == (BIG, SIZE, parts)
    finished = {json.loads(line)["part"] for line in lines[1:]}
    assert len(finished) >= KILL_AFTER

    # Storage holds every part the journal recorded, with the bytes declared (list-parts).
    s3 = seaweedfs.client()
    [upload] = s3.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert upload["Key"].endswith(f"/{BIG}")
    stored = {
        p["PartNumber"]: p["ETag"].strip('"')
        for p in s3.list_parts(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])[
            "Parts"
        ]
    }
    assert {n: stored.get(n) for n in finished} == {n: declared["parts"][n - 1] for n in finished}

    # The second run sends only the parts the journal did not record.
    archive = requests.get(
        f"{url}/api/zarr/?dandiset={dandiset}", headers=headers, timeout=30
    ).json()["results"][0]
    zarr_id = archive["zarr_id"]
    resumed = cli("upload", str(source), "--zarr-id", zarr_id)
    assert resumed["ok"], resumed
    assert resumed["put_requests"] == parts - len(finished)
    assert not list((work / "state").glob("*.parts.jsonl"))
    phase("second run (the other parts, completion, the md5 proof)")

    # The service proved the md5 from storage (the object's ETag is the parts', not an md5),
    # and the archive's checksum is the local tree's.
    head = s3.head_object(Bucket=bucket, Key=upload["Key"])
    assert (head["ContentLength"], head["ETag"].strip('"')) == (
        SIZE,
        composite_etag(declared["parts"]),
    )
    listed = requests.get(f"{url}/api/zarr/{zarr_id}/tree/{BIG}", headers=headers, timeout=30)
    assert listed.status_code == 200, listed.text
    assert (listed.json()["size"], listed.json()["digest"]) == (SIZE, declared["md5"])
    local = processes.run([CLI, "checksum", str(source)], capture_output=True, text=True, env=env)
    assert local.returncode == 0, local.stderr
    remote = requests.get(f"{url}/api/zarr/{zarr_id}/", headers=headers, timeout=30).json()
    assert remote["checksum"] == local.stdout.strip()
    assert remote["checksum_status"] == "complete"
    phase("dandizarr checksum of the local tree")

    # Downloaded, verified by the client (each file's md5, the tree checksum), and the big
    # file's stamps read back without our code.
    downloaded = cli("download", zarr_id, str(work / "copy"))
    assert downloaded["ok"], downloaded
    assert stamps_intact(work / "copy" / BIG)
    for path in source.rglob("*"):
        if path.is_file() and path != source / BIG:
            assert (work / "copy" / path.relative_to(source)).read_bytes() == path.read_bytes()
    phase("download and its checks")
