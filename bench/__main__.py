"""Run the benchmarks: ``python -m bench [NAME ...]`` (default: all but those whose module
says ``IN_DEFAULT_RUN = False``: long ones, run by name), figures printed."""

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
        module = importlib.import_module(f"bench.{name}")
        if not argv and not getattr(module, "IN_DEFAULT_RUN", True):
            print(f"\n=== {name}: not in the default run (python -m bench {name[6:]})")
            continue
        print(f"\n=== {name}", flush=True)
        started = time.perf_counter()
        module.main()
        print(f"=== {name} done in {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
