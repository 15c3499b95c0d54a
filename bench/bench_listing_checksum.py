"""The tree hash of a 1,000,000-line listing, whole process: ``dandizarr checksum --listing``
against dandi's ``zarr_checksum`` (in ``.venv-dandi``, ``make dandi-venvs``) computing the same
tree from the same file, in the same run. Target: at least 10x dandi's time, every run.

The listing is 'path<TAB>size<TAB>md5' lines in S3's order (code-point), nested ``0/i/j/k``
(100 per directory), as an S3 inventory of a Zarr archive gives it. ``BENCH_LISTING_LINES``
shrinks it, ``BENCH_LISTING_RUNS`` sets the runs.
"""

from __future__ import annotations

import hashlib
import os
import resource
import statistics
import tempfile
from pathlib import Path

from bench.s3_env import Timed, cpu_load, dandizarr_command, run_timed

LINES = int(os.environ.get("BENCH_LISTING_LINES", "1000000"))
RUNS = int(os.environ.get("BENCH_LISTING_RUNS", "5"))
TARGET = 10.0
REPO = Path(__file__).resolve().parent.parent
DANDI_PYTHON = Path(os.environ.get("BENCH_DANDI_VENV", REPO / ".venv-dandi")) / "bin" / "python"
DANDI_SCRIPT = Path(__file__).with_name("dandi_zarr_checksum.py")


def write_listing(target: Path, lines: int, per_directory: int = 100) -> None:
    """``lines`` entries at nested paths, sorted in code-point order, sizes and md5s varied."""
    names = sorted(str(i) for i in range(per_directory))
    n = per_directory
    paths = (
        f"0/{names[i // (n * n) % n]}/{names[(i // n) % n]}/{names[i % n]}" for i in range(lines)
    )
    if lines > n * n * n:
        raise ValueError(f"at most {n**3:,} lines")
    with open(target, "w", encoding="utf-8") as out:
        batch = []
        for i, path in enumerate(sorted(paths)):
            md5 = hashlib.md5(i.to_bytes(8, "little")).hexdigest()
            batch.append(f"{path}\t{4096 + i % 1000}\t{md5}\n")
            if len(batch) == 10000:
                out.write("".join(batch))
                batch.clear()
        out.write("".join(batch))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(argv: list[str]) -> tuple[Timed, float]:
    """The run and its CPU seconds (user + system): on a shared machine the wall time also
    counts the time other processes hold the CPUs."""
    before = _children_cpu()
    timed = run_timed(argv)
    return timed, _children_cpu() - before


def main() -> None:
    if not DANDI_PYTHON.exists():
        print(f"skipped: {DANDI_PYTHON} is missing (make dandi-venvs)")
        return
    with tempfile.TemporaryDirectory(prefix="bench-listing-") as tmp:
        listing = Path(tmp) / "listing.tsv"
        write_listing(listing, LINES)
        size_mb = listing.stat().st_size / 1e6
        print(f"listing: {LINES:,} lines, {size_mb:.0f} MB; {RUNS} runs; {cpu_load()}")
        ours_argv = dandizarr_command("checksum", "--listing", str(listing))
        dandi_argv = [str(DANDI_PYTHON), str(DANDI_SCRIPT), str(listing)]
        ours_times: list[float] = []
        dandi_times: list[float] = []
        speedups: list[float] = []
        cpu_speedups: list[float] = []
        for number in range(1, RUNS + 1):
            ours, ours_cpu = _timed(ours_argv)
            theirs, theirs_cpu = _timed(dandi_argv)
            ours_digest = ours.output.split()[0]
            dandi_digest = theirs.output.split()[0]
            if ours_digest != dandi_digest:
                raise RuntimeError(f"digests differ: ours {ours_digest}, dandi {dandi_digest}")
            speedup = theirs.seconds / ours.seconds
            ours_times.append(ours.seconds)
            dandi_times.append(theirs.seconds)
            speedups.append(speedup)
            cpu_speedups.append(theirs_cpu / ours_cpu)
            print(
                f"  run {number}: dandizarr checksum --listing {ours.seconds:.2f} s "
                f"({ours_cpu:.2f} s CPU, {ours.peak_rss_mb:.0f} MB peak), zarr_checksum "
                f"{theirs.seconds:.2f} s ({theirs_cpu:.2f} s CPU, {theirs.peak_rss_mb:.0f} MB "
                f"peak): {speedup:.1f}x ({theirs_cpu / ours_cpu:.1f}x in CPU time)"
            )
        print(f"  digest (both): {ours_digest}")
    print(
        f"dandizarr checksum --listing: min {min(ours_times):.2f} s, median "
        f"{statistics.median(ours_times):.2f} s; zarr_checksum: min {min(dandi_times):.2f} s, "
        f"median {statistics.median(dandi_times):.2f} s"
    )
    worst = min(speedups)
    verdict = "meets" if worst >= TARGET else "MISSES"
    print(
        f"speedup: min {worst:.1f}x, median {statistics.median(speedups):.1f}x "
        f"({verdict} the {TARGET:.0f}x-every-run target); in CPU time min "
        f"{min(cpu_speedups):.1f}x, median {statistics.median(cpu_speedups):.1f}x; {cpu_load()}"
    )


if __name__ == "__main__":
    main()
