"""Sharded uploads at scale (issue #15, benchmarks 4 and 5), measured from outside as a user runs
them: ``dandizarr upload --pack`` (the CLI, its own process) into ``dandizarr serve``.

a. 100,000 chunk files of 4 KiB packed into the service on SeaweedFS: wall time, files/s, the
   objects the bucket holds under the archive, the checksum verified.
b. ``POST /api/zarr/{id}/pack/`` of a loose archive of 10,000 files of 4 KiB (uploaded loose
   first) on SeaweedFS: time until the archive's detail says packing is done, objects before and
   after.
c. A million chunk files (a Zarr v2 array, nested keys, 64 bytes each) packed into the default
   ``dandizarr serve`` (``make serve``: SQLite, local storage, tasks inline), into the service
   on SeaweedFS, and into the service on SeaweedFS and PostgreSQL (a fresh database on
   ``BENCH_DATABASE_URL``'s server): wall time, peak RSS of the service and of the client,
   browse latency of a directory and of a file entry, audit time and peak memory.
   ``BENCH_S3_PACKED_SERVICES`` picks services (default ``serve,s3,pg``).

d. Scale (``make bench-scale``, not part of the default parts): ``bench.scale``.

e. Resume and ``--sync`` at ``BENCH_PACKED_FILES`` chunk files (issue #39), into the first of
   ``BENCH_S3_PACKED_SERVICES`` (``make serve`` by default): the client's peak RSS of an upload
   resumed after the first was killed half-way, of a fresh upload, and of ``upload --sync`` of
   the same tree into the resumed archive once it also
   holds a tenth as many files absent locally (all of the tree held already: every file is
   hashed and matched, the others deleted); target: resume and ``--sync`` at most 2x the
   fresh upload's peak. ``BENCH_S3_PACKED_SYNC=0`` leaves ``--sync`` out;
   ``BENCH_S3_PACKED_FRESH_MB`` takes the fresh upload's peak from elsewhere (``make
   bench-scale``'s upload of the same tree into the same shape) instead of uploading again.

``BENCH_S3_PACKED_CHUNKS`` (default 100000), ``BENCH_S3_PACKED_CONVERT`` (10000) and
``BENCH_PACKED_FILES`` (1000000) scale the three down; ``BENCH_S3_PACKED_PARTS`` picks parts
(e.g. ``c``; default ``abc``). Figures are printed, never asserted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.packed_uploads import (
    BROWSE_REQUESTS,
    CHUNKS,
    CONVERT_FILES,
    FRESH_MB,
    JOBS,
    MILLION,
    PARTS,
    SERVICE_CONTEXTS,
    SERVICES,
    SYNC_STEP,
    TARGET_AUDIT_SECONDS,
    TARGET_BROWSE_MS,
    TARGET_CLIENT_MB,
    TARGET_SECONDS,
    TARGET_SERVICE_MB,
    Service,
    array_paths,
    audit,
    browse_ms,
    objects,
    packed_source,
    phase_times,
    seaweed_service,
    target,
    upload,
    write_array,
)
from bench.s3_env import (
    cpu_load,
    dandizarr_command,
    peak_rss_mb,
)
from bench.scale import part_d


def part_a(tmp: Path) -> None:
    src = tmp / "a.zarr"
    started = time.perf_counter()
    write_array(src, CHUNKS, 4096)
    print(f"\na. {CHUNKS:,} chunk files of 4 KiB written in {time.perf_counter() - started:.1f} s")
    with seaweed_service(tmp, "a") as service:
        dandiset = service.api("POST", "/api/dandisets/", data={"name": "a"}).json()["identifier"]
        done = upload(service, src, dandiset, "a", "--pack")
        counts = objects(service, done["zarr_id"])
        print(
            f"   dandizarr upload --pack -j {JOBS} on SeaweedFS: {done['wall']:.1f} s wall, "
            f"{CHUNKS / done['wall']:,.0f} files/s ({done['files_per_second']:,.0f} inside the "
            f"client), {done['shards']} shards; bucket holds {counts['zarr']} loose objects + "
            f"{counts['zarr_shards']} shard objects; checksum {done['server_checksum']} verified; "
            f"client peak {done['client_mb']:.0f} MB; client phases {phase_times(done)}"
        )


def part_b(tmp: Path) -> None:
    src = tmp / "b.zarr"
    write_array(src, CONVERT_FILES, 4096)
    with seaweed_service(tmp, "b") as service:
        dandiset = service.api("POST", "/api/dandisets/", data={"name": "b"}).json()["identifier"]
        done = upload(service, src, dandiset, "b")
        zarr_id = done["zarr_id"]
        before = objects(service, zarr_id)
        checksum = service.api("GET", f"/api/zarr/{zarr_id}/").json()["checksum"]
        started = time.perf_counter()
        service.api("POST", f"/api/zarr/{zarr_id}/pack/")
        while (detail := service.api("GET", f"/api/zarr/{zarr_id}/").json())["packing"]:
            time.sleep(0.05)
        seconds = time.perf_counter() - started
        after = objects(service, zarr_id)
        print(
            f"\nb. POST pack/ of a loose archive of {CONVERT_FILES:,} files of 4 KiB on SeaweedFS "
            f"(uploaded loose in {done['wall']:.1f} s): packed in {seconds:.1f} s "
            f"({CONVERT_FILES / seconds:,.0f} files/s); objects {before['zarr']} loose + "
            f"{before['zarr_shards']} shards before, {after['zarr']} loose + "
            f"{after['zarr_shards']} shards after; checksum "
            f"{'unchanged' if detail['checksum'] == checksum else 'CHANGED'} ({detail['checksum']})"
        )


def part_c(tmp: Path) -> None:
    kept = os.environ.get("BENCH_PACKED_SOURCE")  # written once, kept for later runs
    src = Path(kept) if kept else tmp / "c.zarr"
    started = time.perf_counter()
    if (src / ".zarray").exists():
        directory, chunk = array_paths(src)
        written = "reused"
    else:
        directory, chunk = write_array(src, MILLION, 64)
        written = f"written in {time.perf_counter() - started:.1f} s"
    print(
        f"\nc. {MILLION:,} chunk files of 64 bytes (Zarr v2, nested keys) {written} ({src}); "
        "targets for a million: "
        f"<= {TARGET_SECONDS:g} s, service <= {TARGET_SERVICE_MB:g} MB, client <= "
        f"{TARGET_CLIENT_MB:g} MB, directory browse < {TARGET_BROWSE_MS:g} ms, audit <= "
        f"{TARGET_AUDIT_SECONDS:g} s (issue #15 today: 443 s, 481 MB, ~720 MB, 14 ms)"
    )
    scale = MILLION / 1_000_000

    for label, service_context in (SERVICE_CONTEXTS[name] for name in SERVICES):
        with service_context(tmp) as service:
            dandiset = service.api("POST", "/api/dandisets/", data={"name": "c"}).json()
            done = upload(service, src, dandiset["identifier"], "c", "--pack")
            zarr_id = done["zarr_id"]
            counts = objects(service, zarr_id)
            directory_ms = browse_ms(service, zarr_id, directory)
            file_ms = browse_ms(service, zarr_id, chunk)
            audit_seconds, audit_mb, verdict = audit(service, zarr_id)
            service_mb = peak_rss_mb(service.pid)
        wall_target = target(done["wall"], TARGET_SECONDS * scale, "s")
        audit_target = target(audit_seconds, TARGET_AUDIT_SECONDS * scale, "s")
        print(
            f"   {label}: {done['wall']:.1f} s wall {wall_target}, "
            f"{MILLION / done['wall']:,.0f} files/s; {counts['zarr']} loose + "
            f"{counts['zarr_shards']} shard objects; checksum {done['server_checksum']} verified\n"
            f"     peak RSS: service {service_mb:.0f} MB "
            f"{target(service_mb, TARGET_SERVICE_MB, 'MB')}, client {done['client_mb']:.0f} MB "
            f"{target(done['client_mb'], TARGET_CLIENT_MB, 'MB')}\n"
            f"     browse (median of {BROWSE_REQUESTS}): directory {directory}/ "
            f"{directory_ms:.1f} ms "
            f"{target(directory_ms, TARGET_BROWSE_MS, 'ms')}, file {chunk} {file_ms:.1f} ms\n"
            f"     audit: {audit_seconds:.1f} s {audit_target}, "
            f"peak {audit_mb:.0f} MB, {verdict}\n"
            f"     client phases: {phase_times(done)}"
        )
    if scale != 1:
        print(f"   (time targets scaled by {scale:g} for {MILLION:,} files)")


def _killed_half_way(service: Service, src: Path, dandiset: str, name: str) -> int:
    """``dandizarr upload --pack`` of ``src`` into a new archive ``name``, killed (SIGKILL)
    once the service holds half of ``src``'s files: how many it held then."""
    created = service.api(
        "POST", "/api/zarr/", json={"name": name, "dandiset": dandiset, "layout": "sharded"}
    ).json()
    zarr_id = created["zarr_id"]
    command = dandizarr_command(
        "upload", str(src), "--zarr-id", zarr_id, "--jobs", str(JOBS), "--no-progress", "--pack"
    )
    environment = {**os.environ, "DANDIZARR_URL": service.url, "DANDIZARR_TOKEN": service.token}
    process = subprocess.Popen(
        command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        while (held := service.api("GET", f"/api/zarr/{zarr_id}/").json()["file_count"]) < (
            MILLION // 2
        ):
            if process.poll() is not None:
                raise RuntimeError(f"the upload to kill ended first (status {process.returncode})")
            time.sleep(0.5)
    finally:
        process.kill()
        process.wait()
    # The killed client's last request (a batch start takes seconds under load) may still be
    # served: a resume started meanwhile sees that batch opened under it and stops ("another
    # upload batch was opened ... while this upload was running", seen at 300,000 files).
    time.sleep(10)
    return int(held)


def part_e(tmp: Path) -> None:
    src, written = packed_source(tmp, "e", MILLION, os.environ.get("BENCH_PACKED_SOURCE"))
    label, service_context = SERVICE_CONTEXTS[SERVICES[0]]
    print(
        f"\ne. resume and --sync of {MILLION:,} chunk files of 64 bytes (source {written}) into "
        f"{label}: client peak RSS against a fresh upload's (target: at most 2x)",
        flush=True,
    )
    steps: list[tuple[str, dict[str, Any]]] = []

    def report(label: str, done: dict[str, Any]) -> None:
        steps.append((label, done))
        print(
            f"   {label}: {done['wall']:.1f} s wall, client peak {done['client_mb']:.0f} MB; "
            f"uploaded {done['uploaded_files']:,}, skipped {done['skipped_files']:,}; client "
            f"phases {phase_times(done)}",
            flush=True,
        )

    with service_context(tmp) as service:
        dandiset = service.api("POST", "/api/dandisets/", data={"name": "e"}).json()
        identifier = dandiset["identifier"]
        held = _killed_half_way(service, src, identifier, "resumed")
        report(
            f"resumed (killed holding {held:,} files)",
            upload(service, src, identifier, "resumed", "--pack"),
        )
        if SYNC_STEP:
            # The resumed archive, which holds the tree, takes a tenth more files absent
            # locally (a second archive would upload the whole tree once more: an hour at
            # 10,000,000).
            extra = tmp / "e-extra"
            write_array(extra / "x", MILLION // 10, 64)
            upload(service, extra, identifier, "resumed", "--pack")
            synced = upload(service, src, identifier, "resumed", "--pack", "--sync")
            report(f"--sync (deleting {synced['deleted_files']:,})", synced)
        if FRESH_MB is None:
            fresh = upload(service, src, identifier, "fresh", "--pack")
            print(f"   fresh: {fresh['wall']:.1f} s wall, client peak {fresh['client_mb']:.0f} MB")
    peak = FRESH_MB if FRESH_MB is not None else fresh["client_mb"]
    source = "given" if FRESH_MB is not None else "measured"
    for label, done in steps:
        ratio = done["client_mb"] / peak
        print(
            f"   {label}: {ratio:.2f}x the fresh upload's {peak:.0f} MB ({source}) "
            f"{'(at most 2x: ok)' if ratio <= 2 else '(MISSED: over 2x)'}"
        )


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(cpu_load())
    keep = os.environ.get("BENCH_S3_PACKED_TMP")
    with tempfile.TemporaryDirectory(prefix="bench-s3-packed-", dir=keep) as tmp:
        tmp_path = Path(tmp)
        parts = (("a", part_a), ("b", part_b), ("c", part_c), ("d", part_d), ("e", part_e))
        for part, run in parts:
            if part in PARTS:
                run(tmp_path)
    print(cpu_load())


if __name__ == "__main__":
    main()
