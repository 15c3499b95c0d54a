"""Loose upload on a real S3 server (SeaweedFS), measured from outside as a user runs it.

10,000 chunk files of 4 KiB (a Zarr v2 array whose keys nest as ``0/i/j/k``) uploaded by:
- ``dandizarr upload`` (the CLI, a process of its own) into ``dandizarr serve`` on S3,
- the ceiling: presigned PUTs of the same files, signed like the service's, sent by this
  process through the client's own transfer engine, as many at once (before and after),
- ``s5cmd cp``, ``rclone copy`` and ``aws s3 sync`` of the same directory into other prefixes,
- the newest ``dandi upload`` into the same service (benchmark 2: the DANDI client's flow).

Every figure is files/s of the whole command (process start to exit); our upload verifies every
file and ends with the server's checksum equal to the local one. Rounds: ``BENCH_S3_ROUNDS``.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from bench.s3_env import (
    MachineCpu,
    RawPuts,
    S3Service,
    ServerShare,
    cpu_load,
    dandizarr_command,
    machine_cpu,
    run_timed,
    s3_env,
    seaweedfs,
    server_share,
    service_on,
    tool,
)
from tests.support.seaweedfs import ACCESS_KEY, SECRET_KEY

FILES = int(os.environ.get("BENCH_S3_FILES", "10000"))
FILE_SIZE = 4096
JOBS = int(os.environ.get("BENCH_S3_JOBS", "32"))
ROUNDS = int(os.environ.get("BENCH_S3_ROUNDS", "1"))
DANDI = Path(__file__).resolve().parents[1] / ".venv-dandi" / "bin" / "dandi"
TARGET_CEILING = 0.90
TARGET_DANDI = 0.80


def write_zarr(root: Path, count: int) -> int:
    """A Zarr v2 group with one uncompressed array at ``0`` whose ``count`` chunks of 4 KiB
    are the keys ``0/i/j/k`` (100 per directory); returns the number of files written."""
    leaves = max(1, count // 100)
    side = max(1, int(leaves**0.5))
    rows = max(1, leaves // side)
    array = root / "0"
    array.mkdir(parents=True)
    (root / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    (array / ".zarray").write_text(
        json.dumps(
            {
                "zarr_format": 2,
                "shape": [side, rows, 100 * 1024],
                "chunks": [1, 1, 1024],
                "dtype": "<u4",
                "compressor": None,
                "fill_value": 0,
                "filters": None,
                "order": "C",
                "dimension_separator": "/",
            }
        )
    )
    written = 2
    for i in range(side):
        for j in range(rows):
            leaf = array / str(i) / str(j)
            leaf.mkdir(parents=True)
            for k in range(100):
                (leaf / str(k)).write_bytes(os.urandom(FILE_SIZE))
                written += 1
    return written


def local_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def ceiling(s3: S3Service, src: Path, paths: list[str], prefix: str) -> tuple[float, MachineCpu]:
    """files/s of raw presigned PUTs of the files (``bench.s3_env.RawPuts``), and the
    machine's CPU meanwhile."""
    puts = RawPuts.prepare(s3.endpoint_url, s3.bucket, src, paths, prefix)
    with machine_cpu() as cpu:
        started, ended = puts.send(JOBS)
    return len(paths) / (ended - started), cpu[0]


def new_dandiset(service: S3Service, name: str) -> str:
    response = requests.post(
        f"{service.url}/api/dandisets/",
        json={"name": name},
        headers={"Authorization": f"Token {service.token}"},
        timeout=30,
    )
    response.raise_for_status()
    return str(response.json()["identifier"])


def dandizarr_upload(
    service: S3Service, src: Path, dandiset: str, name: str
) -> tuple[float, MachineCpu]:
    argv = dandizarr_command(
        "upload",
        "--server",
        service.url,
        "--token",
        service.token,
        "--dandiset",
        dandiset,
        "--name",
        name,
        "--no-progress",
        "--json",
        "-j",
        str(JOBS),
        str(src),
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with server_share(service) as share, machine_cpu() as cpu:
        timed = run_timed(argv)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = json.loads(timed.output[timed.output.index("{") : timed.output.rindex("}") + 1])
    if not result.get("ok"):
        raise RuntimeError(f"dandizarr upload did not verify: {result}")
    client_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    print_share("dandizarr upload", timed.seconds, client_cpu, share[0])
    phases = ", ".join(f"{k} {v:.2f} s" for k, v in result.get("phase_seconds", {}).items())
    print(
        f"    its phases: {phases} (start/add/complete: the requests to the service; adds run "
        f"while PUTs do); {result.get('batches')} batches"
    )
    return timed.seconds, cpu[0]


def tool_upload(name: str, service: S3Service, src: Path, prefix: str, work: Path) -> float | None:
    """One transfer tool's upload of ``src`` into ``prefix`` of the bucket, in seconds; None
    when the tool is not installed (``make bench-tools``)."""
    executable = tool(name)
    if executable is None:
        return None
    endpoint = service.endpoint_url
    target = f"s3://{service.bucket}/{prefix}/"
    env: dict[str, str] = {}
    if name == "s5cmd":
        argv = [
            executable,
            "--endpoint-url",
            endpoint,
            "--numworkers",
            "64",
            "cp",
            f"{src}/",
            target,
        ]
    elif name == "rclone":
        env = {
            "RCLONE_CONFIG_WEED_TYPE": "s3",
            "RCLONE_CONFIG_WEED_PROVIDER": "SeaweedFS",
            "RCLONE_CONFIG_WEED_ENDPOINT": endpoint,
            "RCLONE_CONFIG_WEED_ACCESS_KEY_ID": ACCESS_KEY,
            "RCLONE_CONFIG_WEED_SECRET_ACCESS_KEY": SECRET_KEY,
        }
        argv = [
            executable,
            "copy",
            str(src),
            f"weed:{service.bucket}/{prefix}",
            "--transfers",
            "32",
            "--checkers",
            "32",
            "--s3-no-check-bucket",
        ]
    else:
        config = work / "aws-config"
        config.write_text("[default]\ns3 =\n    max_concurrent_requests = 64\n")
        env = {"AWS_CONFIG_FILE": str(config)}
        argv = [executable, "s3", "sync", str(src), target, "--endpoint-url", endpoint, "--quiet"]
    return run_timed(argv, env).seconds


def dandi_upload(service: S3Service, src: Path, work: Path) -> float | None:
    """The newest ``dandi upload`` of ``src`` as an asset of a new dandiset, in seconds (the
    dandiset's directory is made by ``dandi download`` first, as a DANDI user does), with a
    breakdown printed: dandi's wall and CPU time, and the service's CPU seconds and request
    time meanwhile (whether the server is what slows dandi)."""
    if not DANDI.exists():
        return None
    dandiset = new_dandiset(service, "bench dandi")
    home = work / "dandi-home"
    home.mkdir(exist_ok=True)
    netloc = service.url.split("://", 1)[1]
    env = {
        **os.environ,
        "PATH": f"{DANDI.parent}:{os.environ.get('PATH', '')}",
        "HOME": str(home),
        "DANDI_NO_ET": "1",
        "DANDI_CACHE": "ignore",
        "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring",
        f"{netloc.upper()}_API_KEY": service.token,
        "DANDI_API_KEY": service.token,
    }
    into = work / "dandi-download"
    into.mkdir(exist_ok=True)
    url = f"{service.url}/api/dandisets/{dandiset}/versions/draft/"
    subprocess.run(
        [str(DANDI), "download", url, "-o", str(into)], env=env, check=True, capture_output=True
    )
    dandiset_dir = into / dandiset
    shutil.copytree(src, dandiset_dir / "bench.zarr")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with server_share(service) as share:
        started = time.perf_counter()
        done = subprocess.run(
            [str(DANDI), "upload", "-i", service.url, "--validation", "skip"],
            cwd=dandiset_dir,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"dandi upload failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    dandi_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    print_share("dandi upload", elapsed, dandi_cpu, share[0])
    return elapsed


def print_share(label: str, wall: float, client_cpu: float, share: ServerShare) -> None:
    """Where a client's wall time went: its own CPU, and the server's CPU and request time."""
    print(
        f"  {label}: wall {wall:.1f} s, its own CPU {client_cpu:.1f} s; the server meanwhile: "
        f"CPU {share.cpu_seconds:.1f} s, {share.requests} requests taking "
        f"{share.request_seconds:.1f} s in all ({share.request_seconds / wall:.0%} of the wall "
        "time)"
    )


def print_cpu_bound(cpus: list[dict[str, MachineCpu]]) -> None:
    """How far the machine's CPU alone lets a verified upload approach the ceiling: both
    send the same PUTs, and the upload also reads and hashes the files, has them signed and
    recorded, verifies them and updates the tree, on the cores storage runs on."""
    ceiling_cpu = statistics.median(
        (c["ceiling before"].busy + c["ceiling after"].busy) / 2 for c in cpus
    )
    ceiling_cores = statistics.median(
        (c["ceiling before"].cores_busy + c["ceiling after"].cores_busy) / 2 for c in cpus
    )
    ours = statistics.median(c["dandizarr upload"].busy for c in cpus)
    ours_cores = statistics.median(c["dandizarr upload"].cores_busy for c in cpus)
    print(
        f"  CPU: the ceiling's PUTs took {ceiling_cpu:.1f} CPU-s of the machine "
        f"({ceiling_cores:.2f} cores busy), dandizarr upload {ours:.1f} CPU-s "
        f"({ours_cores:.2f} cores busy): with as many cores busy as the ceiling kept, the "
        f"CPU alone bounds the upload to {ceiling_cpu / ours:.0%} of the ceiling"
    )


def one_round(
    number: int, work: Path, src: Path, files: list[str]
) -> tuple[dict[str, float], dict[str, MachineCpu]]:
    count = len(files)
    rates: dict[str, float] = {}
    cpu: dict[str, MachineCpu] = {}
    with (
        seaweedfs(work / "seaweedfs") as s3,
        service_on(s3, work / "service", f"bench-{number}") as service,
    ):
        # A new SeaweedFS allocates its volumes on the first writes: warm it up first, so the
        # figures compare uploads into the same warm server.
        ceiling(service, src, files, "warm-up")
        rates["ceiling before"], cpu["ceiling before"] = ceiling(
            service, src, files, "ceiling-before"
        )
        dandiset = new_dandiset(service, "bench")
        seconds, cpu["dandizarr upload"] = dandizarr_upload(service, src, dandiset, "a.zarr")
        rates["dandizarr upload"] = count / seconds
        for name in ("s5cmd", "rclone", "aws"):
            seconds = tool_upload(name, service, src, f"tool-{name}", work)
            if seconds is not None:
                rates[name] = count / seconds
        seconds = dandi_upload(service, src, work)
        if seconds is not None:
            rates["dandi upload"] = count / seconds
        rates["ceiling after"], cpu["ceiling after"] = ceiling(service, src, files, "ceiling-after")
    for label, rate in rates.items():
        print(f"  {label:>18}: {rate:7,.0f} files/s")
    for label, used in cpu.items():
        print(f"  the machine's CPU during {label}: {used.describe()}")
    return rates, cpu


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ.update(s3_env())
    with tempfile.TemporaryDirectory(prefix="bench-s3-upload-") as tmp:
        work = Path(tmp)
        src = work / "src.zarr"
        write_zarr(src, FILES)
        files = local_files(src)
        print(
            f"{len(files):,} files ({FILE_SIZE} bytes per chunk, nested 0/i/j/k) on SeaweedFS, "
            f"{JOBS} parallel PUTs; {cpu_load()}"
        )
        rounds = []
        cpus: list[dict[str, MachineCpu]] = []
        for number in range(1, ROUNDS + 1):
            print(f"round {number}:")
            round_dir = work / f"round-{number}"
            round_dir.mkdir()
            rates, cpu = one_round(number, round_dir, src, files)
            rounds.append(rates)
            cpus.append(cpu)
    print(f"after: {cpu_load()}")
    ours = statistics.median(r["dandizarr upload"] for r in rounds)
    ceiling_rate = statistics.median((r["ceiling before"] + r["ceiling after"]) / 2 for r in rounds)
    ratio = ours / ceiling_rate
    print(
        f"dandizarr upload {ours:,.0f} files/s = {ratio:.0%} of the presigned-PUT ceiling "
        f"({ceiling_rate:,.0f}) ({'meets' if ratio >= TARGET_CEILING else 'MISSES'} the "
        f"{TARGET_CEILING:.0%} target)"
    )
    print_cpu_bound(cpus)
    tools = {
        n: statistics.median(r[n] for r in rounds)
        for n in ("s5cmd", "rclone", "aws")
        if n in rounds[0]
    }
    for name, rate in tools.items():
        print(f"  vs {name}: {ours / rate:.2f}x ({rate:,.0f} files/s)")
    if tools:
        fastest = max(tools, key=lambda n: tools[n])
        verdict = "meets" if ours >= tools[fastest] else "MISSES"
        print(f"  the fastest tool is {fastest}: {verdict} the target of at least its rate")
    if "dandi upload" in rounds[0]:
        dandi = statistics.median(r["dandi upload"] for r in rounds)
        print(
            f"dandi upload (newest) on our server: {dandi:,.0f} files/s = "
            f"{dandi / ceiling_rate:.0%} of the ceiling "
            f"({'meets' if dandi / ceiling_rate >= TARGET_DANDI else 'MISSES'} the "
            f"{TARGET_DANDI:.0%} target)"
        )


if __name__ == "__main__":
    main()
