"""Run the benchmarks: ``python -m bench [NAME ...]`` (default: all), figures printed."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

import bench


def main(argv: list[str]) -> int:
    names = sorted(
        m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_")
    )
    selected = [n for n in names if not argv or n.removeprefix("bench_") in argv or n in argv]
    for name in selected:
        print(f"\n=== {name}", flush=True)
        started = time.perf_counter()
        importlib.import_module(f"bench.{name}").main()
        print(f"=== {name} done in {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
