"""Tree-hash benchmarks: full compute_tree of large listings, and apply_changes batches.

Each case runs in a fresh subprocess so that its peak RSS (ru_maxrss) is its own.
Targets (2-core machine): 1,000,000 entries in <= 3 s and <= 150 MB peak RSS.
"""

from __future__ import annotations

import json
import random
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

NAMES = sorted(str(i) for i in range(100))  # code-point order, as S3 lists
SIZE = 4096


def _md5(i: int) -> str:
    return f"{(i * 0x9E3779B97F4A7C15) % (1 << 128):032x}"


MD5S = [_md5(i) for i in range(1000)]


def nested_1m() -> Iterator[tuple[str, int, str]]:
    """0/i/j/k for i, j, k in range(100), lazily, sorted by path."""
    md5s = MD5S
    for i in NAMES:
        for j in NAMES:
            prefix = f"0/{i}/{j}/"
            for n, k in enumerate(NAMES):
                yield prefix + k, SIZE, md5s[n]


def flat_100k() -> Iterator[tuple[str, int, str]]:
    md5s = MD5S
    for n, name in enumerate(sorted(f"{i}.chunk" for i in range(100_000))):
        yield name, SIZE, md5s[n % 1000]


CASES: dict[str, tuple[Callable[[], Iterator[tuple[str, int, str]]], int]] = {
    "nested_1m": (nested_1m, 1_000_000),
    "flat_100k": (flat_100k, 100_000),
}


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def run_compute_case(name: str, with_callback: bool) -> dict[str, object]:
    from dandizarr.checksums import DirectoryListing, compute_tree

    make, count = CASES[name]
    directories = 0

    def on_directory(path: str, listing: DirectoryListing) -> None:
        nonlocal directories
        directories += 1

    started = time.perf_counter()
    summary = compute_tree(make(), on_directory=on_directory if with_callback else None)
    seconds = time.perf_counter() - started
    assert summary.count == count
    return {
        "seconds": seconds,
        "entries_per_s": count / seconds,
        "peak_mb": _peak_mb(),
        "digest": summary.digest,
    }


def run_generation_case(name: str) -> dict[str, object]:
    make, _count = CASES[name]
    started = time.perf_counter()
    for _ in make():
        pass
    return {"seconds": time.perf_counter() - started, "peak_mb": _peak_mb()}


def run_apply_case(layout: str) -> dict[str, object]:
    from dandizarr.checksums import FileState, MemoryChecksumTree, apply_changes

    rng = random.Random(0)
    if layout == "nested":  # 0/i/j/k with 100,000 files: 10 x 100 x 100
        paths = [f"0/{i}/{j}/{k}" for i in NAMES[:10] for j in NAMES for k in NAMES]
    else:
        paths = [f"{i}.chunk" for i in range(100_000)]
    tree = MemoryChecksumTree()
    for start in range(0, len(paths), 25_000):  # build the tree through apply_changes
        apply_changes(
            tree, {p: FileState(SIZE, _md5(n)) for n, p in enumerate(paths[start : start + 25_000])}
        )
    batches = 5
    timings = []
    reads = writes = 0
    for b in range(batches):
        tree.reset_counters()
        # 500 changes: overwrites, removals, and additions in new directories.
        changes: dict[str, FileState | None] = {}
        for p in rng.sample(paths, 450):
            changes[p] = None if rng.random() < 0.2 else FileState(SIZE + b, _md5(b))
        for n in range(50):
            new = f"1/{b}/{n}" if layout == "nested" else f"new-{b}-{n}"
            changes[new] = FileState(1, _md5(n))
        started = time.perf_counter()
        apply_changes(tree, changes)
        timings.append(time.perf_counter() - started)
        reads, writes = tree.reads, tree.writes + tree.deletes
    return {
        "seconds_per_batch": sum(timings) / batches,
        "reads_per_batch": reads,
        "writes_per_batch": writes,
        "read_calls": tree.read_calls,
        "write_calls": tree.write_calls,
        "peak_mb": _peak_mb(),
    }


def _in_subprocess(*args: str) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-m", "bench.bench_checksums", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    for name in CASES:
        generated = _in_subprocess("generate", name)
        plain = _in_subprocess("compute", name)
        callback = _in_subprocess("compute-callback", name)
        print(
            f"compute_tree {name}: {plain['seconds']:.2f} s,"
            f" {plain['entries_per_s']:,.0f} entries/s,"
            f" peak RSS {plain['peak_mb']:.0f} MB (of which generating the listing:"
            f" {generated['seconds']:.2f} s, {generated['peak_mb']:.0f} MB);"
            f" with on_directory: {callback['seconds']:.2f} s, {callback['peak_mb']:.0f} MB",
            flush=True,
        )
    for layout in ("nested", "flat"):
        r = _in_subprocess("apply", layout)
        print(
            f"apply_changes 500-file batch into 100,000 files ({layout}):"
            f" {r['seconds_per_batch'] * 1000:.0f} ms/batch, {r['reads_per_batch']} directory reads"
            f" in {r['read_calls']} call(s), {r['writes_per_batch']} writes/deletes in"
            f" {r['write_calls']} write call(s), peak RSS {r['peak_mb']:.0f} MB",
            flush=True,
        )


def _child(argv: list[str]) -> None:
    command, name = argv
    if command == "generate":
        result = run_generation_case(name)
    elif command == "compute":
        result = run_compute_case(name, with_callback=False)
    elif command == "compute-callback":
        result = run_compute_case(name, with_callback=True)
    else:
        result = run_apply_case(name)
    print(json.dumps(result))


if __name__ == "__main__":
    _child(sys.argv[1:])
