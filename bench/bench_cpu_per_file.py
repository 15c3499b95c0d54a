"""CPU spent per verified file, a figure that holds on any machine (wall time on a 2-core machine
is bounded by the CPU that storage, service and client share).

10,000 chunk files of 4 KiB on SeaweedFS: a loose upload (``dandizarr upload``), a packed one
(``--pack``) and a download (``dandizarr download``), each verifying every file and the tree
checksum; beside them ``s5cmd cp`` up and down of the same files, which verifies nothing.
Printed: CPU-seconds (user + system) per 10,000 files of the client process, of the service
(``dandizarr serve``: web and tasks), of SeaweedFS, and the ratio of ours (client + service) to
s5cmd's client. Target (issue: Layout II): ours at most 1.5x s5cmd's.

Then, when py-spy is installed (``make bench-tools``), each of our three runs once more with the
client and the service sampled (``bench/profiles.py``), and where their CPU went is printed. The
figures above come from the runs nobody sampled.
"""

from __future__ import annotations

import json
import os
import resource
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench import profiles
from bench.bench_s3_upload import local_files, new_dandiset, tool_upload, write_zarr
from bench.s3_env import (
    S3Service,
    cpu_seconds,
    dandizarr_command,
    run_timed,
    seaweedfs,
    server_share,
    service_on,
    tool,
)

FILES = int(os.environ.get("BENCH_S3_FILES", "10000"))
JOBS = int(os.environ.get("BENCH_S3_JOBS", "32"))
PER = 10_000
TARGET = 1.5


@dataclass
class Spent:
    label: str
    files: int
    client: float
    service: float
    storage: float

    def per(self, seconds: float) -> float:
        return seconds * PER / self.files

    def line(self) -> str:
        ours = self.per(self.client + self.service)
        client, service = self.per(self.client), self.per(self.service)
        return (
            f"  {self.label:>22}: client {client:5.2f}, service {service:5.2f}, ours "
            f"{ours:5.2f}, storage {self.per(self.storage):5.2f} CPU-s per {PER:,} files"
        )


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(label: str, service: S3Service, files: int, run: Callable[[], object]) -> Spent:
    storage_pid = service.s3.process.pid if service.s3.process else 0
    storage_before = cpu_seconds([storage_pid])
    before = _children_cpu()
    with server_share(service) as share:
        run()
    client = _children_cpu() - before
    return Spent(
        label, files, client, share[0].cpu_seconds, cpu_seconds([storage_pid]) - storage_before
    )


def _cli(service: S3Service, *args: str, spy: Path | None = None) -> dict[str, object]:
    argv = dandizarr_command(
        *args[:1], "--server", service.url, "--token", service.token, *args[1:]
    )
    timed = run_timed(profiles.spied(argv, spy) if spy else argv)
    if "{" not in timed.output:
        raise RuntimeError(f"dandizarr {args[0]} printed no summary: {timed.output[-2000:]}")
    result: dict[str, object] = json.loads(
        timed.output[timed.output.index("{") : timed.output.rindex("}") + 1]
    )
    if not result.get("ok"):
        raise RuntimeError(f"dandizarr {args[0]} did not verify: {result}")
    return result


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        src = work / "src.zarr"
        count = write_zarr(src, FILES)
        assert len(local_files(src)) == count
        with (
            seaweedfs(work / "seaweedfs") as s3,
            service_on(s3, work / "service", "bench-cpu") as service,
        ):
            tool_upload("s5cmd", service, src, "warm-up", work)  # SeaweedFS makes its volumes
            dandiset = new_dandiset(service, "cpu")
            zarr_ids: dict[str, str] = {}

            def upload(name: str, *extra: str, spy: Path | None = None) -> Callable[[], object]:
                def run() -> None:
                    options = ["--dandiset", dandiset, "--name", name, "--no-progress", "--json"]
                    result = _cli(
                        service, "upload", *options, "-j", str(JOBS), *extra, str(src), spy=spy
                    )
                    zarr_ids[name] = str(result["zarr_id"])

                return run

            def download(into: Path, spy: Path | None = None) -> None:
                _cli(service, "download", zarr_ids["loose.zarr"], str(into), "--jobs", str(JOBS),
                     "--json", spy=spy)  # fmt: skip

            def s5cmd_down(binary: str) -> None:
                source = f"s3://{service.bucket}/s5cmd/*"
                run_timed([binary, "--endpoint-url", service.endpoint_url, "--numworkers", "64",
                           "cp", source, f"{work}/s5/"])  # fmt: skip

            spent = [
                measure("dandizarr upload", service, count, upload("loose.zarr")),
                measure("dandizarr upload --pack", service, count, upload("packed.zarr", "--pack")),
                measure("dandizarr download", service, count, lambda: download(work / "down")),
            ]
            s5cmd = tool("s5cmd")
            if s5cmd is not None:
                up = measure(
                    "s5cmd cp (up)",
                    service,
                    count,
                    lambda: tool_upload("s5cmd", service, src, "s5cmd", work),
                )
                down = measure("s5cmd cp (down)", service, count, lambda: s5cmd_down(s5cmd))
                spent += [up, down]
            profiled: list[tuple[str, Path, Path]] = []
            if profiles.available():
                for label, run in (
                    ("dandizarr upload", lambda spy: upload("loose-p.zarr", spy=spy)()),
                    ("dandizarr upload --pack",
                     lambda spy: upload("packed-p.zarr", "--pack", spy=spy)()),
                    ("dandizarr download", lambda spy: download(work / "down-p", spy=spy)),
                ):  # fmt: skip
                    client_raw, service_raw = work / f"{label}.client", work / f"{label}.service"
                    with profiles.sampling(service.pid, service_raw):
                        run(client_raw)
                    profiled.append((label, client_raw, service_raw))
        print(f"{count:,} files of 4 KiB on SeaweedFS, every file and the checksum verified (ours)")
        for item in spent:
            print(item.line())
        by = {s.label: s for s in spent}
        if "s5cmd cp (up)" in by:
            up = by["s5cmd cp (up)"].per(by["s5cmd cp (up)"].client)
            down = by["s5cmd cp (down)"].per(by["s5cmd cp (down)"].client)
            for label, theirs in (
                ("dandizarr upload", up),
                ("dandizarr upload --pack", up),
                ("dandizarr download", down),
            ):
                ours = by[label].per(by[label].client + by[label].service)
                verdict = "met" if ours <= TARGET * theirs else "missed"
                print(f"  {label}: ours / s5cmd's client = {ours / theirs:.2f}x "
                      f"(target <= {TARGET}x: {verdict})")  # fmt: skip
        else:
            print("  s5cmd is not installed (make bench-tools): no ratio")
        if not profiled:
            print("  py-spy is not installed (make bench-tools): no profile")
        for label, client_raw, service_raw in profiled:
            print(f"  {label}, sampled by py-spy at {profiles.RATE}/s (a run of its own):")
            print(f"    client\n{profiles.summary(client_raw)}")
            print(f"    service\n{profiles.summary(service_raw)}")
