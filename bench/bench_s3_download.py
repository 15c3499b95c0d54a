"""Download on a real S3 server (SeaweedFS): ``dandizarr download`` of a loose archive of
10,000 files of 4 KiB at nested paths, against ``s5cmd cp`` and ``rclone copy`` of the same
archive's objects from the same bucket, each into a fresh directory (issue #15, benchmark 3).

Everything runs on this machine as separate processes (SeaweedFS, ``dandizarr serve`` on it:
SQLite, tasks inline; each download a command as a user runs it). Ours verifies every file's
md5 and the tree checksum (its ``--json`` summary says so, and is checked); the tools verify
nothing. The machine is shared, so each round runs all three back to back and the figure is
the median over ``BENCH_DOWNLOAD_ROUNDS`` rounds of our rate over the fastest tool's, measured
in the same round. Also: a packed (sharded) copy of the same files, ours alone (no tool can
cut files out of shard objects).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from bench.s3_env import (
    S3Service,
    cpu_load,
    dandizarr_command,
    run_timed,
    s3_env,
    seaweedfs,
    service_on,
    tool,
    write_nested_files,
)

FILES = int(os.environ.get("BENCH_DOWNLOAD_FILES", "10000"))
FILE_SIZE = 4096
JOBS = int(os.environ.get("BENCH_DOWNLOAD_JOBS", "64"))
ROUNDS = int(os.environ.get("BENCH_DOWNLOAD_ROUNDS", "3"))
S5CMD_WORKERS = 64
RCLONE_TRANSFERS = 32


def _count_files(root: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(root))


def _ours(service: S3Service, zarr_id: str, dest: Path) -> tuple[float, dict[str, object]]:
    """``dandizarr download`` into a fresh ``dest``: (seconds, its JSON summary)."""
    timed = run_timed(
        dandizarr_command(
            "download",
            zarr_id,
            str(dest),
            "--server",
            service.url,
            "--token",
            service.token,
            "--jobs",
            str(JOBS),
            "--json",
        )
    )
    summary = json.loads(timed.output[timed.output.index("{") : timed.output.rindex("}") + 1])
    if not summary["ok"] or summary["downloaded_files"] != FILES:
        raise RuntimeError(f"download did not verify: {summary}")
    return timed.seconds, summary


def _s5cmd(service: S3Service, prefix: str, dest: Path) -> float | None:
    binary = tool("s5cmd")
    if binary is None:
        return None
    timed = run_timed(
        [
            binary,
            "--endpoint-url",
            service.endpoint_url,
            "--numworkers",
            str(S5CMD_WORKERS),
            "cp",
            f"s3://{service.bucket}/{prefix}*",
            f"{dest}/",
        ]
    )
    return timed.seconds


def _rclone(service: S3Service, prefix: str, dest: Path) -> float | None:
    binary = tool("rclone")
    if binary is None:
        return None
    env = s3_env()
    remote = {
        "RCLONE_CONFIG_WEED_TYPE": "s3",
        "RCLONE_CONFIG_WEED_PROVIDER": "Other",
        "RCLONE_CONFIG_WEED_ENDPOINT": service.endpoint_url,
        "RCLONE_CONFIG_WEED_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"],
        "RCLONE_CONFIG_WEED_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"],
        "RCLONE_CONFIG_WEED_REGION": env["AWS_REGION"],
    }
    timed = run_timed(
        [
            binary,
            "copy",
            f"weed:{service.bucket}/{prefix}",
            str(dest),
            "--transfers",
            str(RCLONE_TRANSFERS),
            "--checkers",
            str(RCLONE_TRANSFERS),
        ],
        env=remote,
    )
    return timed.seconds


def _timed_into(tmp: Path, name: str, run: object) -> float | None:
    """Run ``run(dest)`` into a fresh directory; files/s, after checking every file arrived."""
    dest = tmp / name
    shutil.rmtree(dest, ignore_errors=True)
    seconds = run(dest)  # type: ignore[operator]
    if seconds is None:
        return None
    found = _count_files(dest)
    if found != FILES:
        raise RuntimeError(f"{name}: {found} files downloaded, expected {FILES}")
    shutil.rmtree(dest, ignore_errors=True)
    return FILES / float(seconds)


def main() -> None:
    from dandizarr.client import DandizarrClient

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-s3-download-")))
        src = tmp / "src"
        paths = write_nested_files(src, FILES, FILE_SIZE)
        s3 = stack.enter_context(seaweedfs(tmp / "weed"))
        service = stack.enter_context(service_on(s3, tmp / "service", "bench-download"))
        with DandizarrClient(service.url, service.token, jobs=32) as client:
            dandiset = client.create_dandiset("bench")["identifier"]
            loose = client.upload(src, dandiset=dandiset, name="loose.zarr")
            packed = client.upload(src, dandiset=dandiset, name="packed.zarr", pack=True)
            for up in (loose, packed):
                if not up.ok:
                    raise RuntimeError(f"upload did not verify: {up.to_json()}")
            key = str(client.stat(loose.zarr_id, paths[0])["s3_key"])
        prefix = key[: -len(paths[0])]
        print(
            f"{FILES:,} files of {FILE_SIZE} bytes (nested 0/i/j/k) on SeaweedFS, {ROUNDS} rounds; "
            f"dandizarr download --jobs {JOBS}, s5cmd --numworkers {S5CMD_WORKERS}, "
            f"rclone --transfers {RCLONE_TRANSFERS} --checkers {RCLONE_TRANSFERS}"
        )
        print(f"  {cpu_load()}")
        ratios: list[float] = []
        summary: dict[str, object] = {}
        for number in range(1, ROUNDS + 1):

            def ours(dest: Path) -> float:
                seconds, found = _ours(service, loose.zarr_id, dest)
                summary.update(found)
                return seconds

            rates = {
                "dandizarr download": _timed_into(tmp, "ours", ours),
                "s5cmd cp": _timed_into(tmp, "s5cmd", lambda d: _s5cmd(service, prefix, d)),
                "rclone copy": _timed_into(tmp, "rclone", lambda d: _rclone(service, prefix, d)),
            }
            tools = {k: v for k, v in rates.items() if k != "dandizarr download" and v}
            shown = ", ".join(
                f"{k} {v:,.0f} files/s" if v else f"{k} (not installed)" for k, v in rates.items()
            )
            line = f"round {number}: {shown}"
            if tools:
                fastest = max(tools, key=lambda k: tools[k])
                ratio = float(rates["dandizarr download"] or 0) / tools[fastest]
                ratios.append(ratio)
                line += f"; ours / fastest ({fastest}) = {ratio:.0%}"
            print(line, flush=True)
        print(
            f"  verified: {summary['downloaded_files']:,} files, each md5 checked while "
            f"streamed; tree checksum {summary['local_checksum']} equals the server's "
            f"{summary['server_checksum']}"
        )
        if ratios:
            median = statistics.median(ratios)
            verdict = "meets" if median >= 1 else "MISSES"
            print(
                f"dandizarr download / fastest tool: median {median:.0%} over {len(ratios)} "
                f"rounds ({', '.join(f'{r:.0%}' for r in ratios)}) ({verdict} the 100% target)"
            )
        dest = tmp / "packed"
        seconds, _ = _ours(service, packed.zarr_id, dest)
        print(
            f"packed copy of the same files: dandizarr download {FILES / seconds:,.0f} files/s "
            "(byte ranges of shard objects), verified"
        )
        print(f"  {cpu_load()}")


if __name__ == "__main__":
    main()
