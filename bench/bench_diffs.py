"""A diff of 100 changes in a 1,000,000-file archive (issue #49, goal: at most 1 s), the way the
service computes it (``dandizarr.checksums.diff``: the two ``.checksum`` trees read top-down,
each listing read decoded from its stored bytes, as from storage) against what a client has to
do without it, in the same run: read every listing of both trees and compare their files.

The trees are nested ``0/i/j/k`` (100 names a directory, 10,101 directories); the second has
100 files changed (modified, added, deleted) at random places. Figures are printed: the time
and the listings read. ``BENCH_DIFF_FILES`` shrinks it, ``BENCH_DIFF_CHANGES`` sets the
changes.
"""

from __future__ import annotations

import hashlib
import os
import random
import time

from dandizarr.checksums import (
    DirectoryListing,
    compute_tree,
    decode_checksum_file,
    encode_checksum_file,
)
from dandizarr.checksums.diff import tree_changes

FILES = int(os.environ.get("BENCH_DIFF_FILES", "1000000"))
CHANGES = int(os.environ.get("BENCH_DIFF_CHANGES", "100"))
GOAL_SECONDS = 1.0


def entries(count: int) -> dict[str, tuple[int, str]]:
    names = [f"{i:02d}" for i in range(100)]
    files = {}
    for i in range(count):
        path = f"0/{names[i // 10000 % 100]}/{names[i // 100 % 100]}/{names[i % 100]}"
        files[path] = (64, hashlib.md5(str(i).encode()).hexdigest())
    return files


def stored(files: dict[str, tuple[int, str]]) -> dict[str, bytes]:
    """Each directory's .checksum file, as storage holds it."""
    listings: dict[str, bytes] = {}

    def keep(directory: str, listing: DirectoryListing) -> None:
        listings[directory] = encode_checksum_file(listing)

    compute_tree(sorted((p, s, m) for p, (s, m) in files.items()), on_directory=keep)
    return listings


class Reads:
    def __init__(self, listings: dict[str, bytes]) -> None:
        self.listings, self.count = listings, 0

    def __call__(self, directory: str) -> DirectoryListing | None:
        self.count += 1
        data = self.listings.get(directory)
        return None if data is None else decode_checksum_file(data)


def main() -> None:
    rng = random.Random(49)
    before = entries(FILES)
    after = dict(before)
    paths = sorted(before)
    for path in rng.sample(paths, CHANGES // 2):
        after[path] = (65, hashlib.md5(path.encode()).hexdigest())  # modified
    for path in rng.sample(paths, CHANGES // 4):
        after.pop(path, None)  # deleted
    for i in range(CHANGES - CHANGES // 2 - CHANGES // 4):
        after[f"0/new/{i}"] = (7, hashlib.md5(b"%d" % i).hexdigest())  # added
    started = time.perf_counter()
    old, new = stored(before), stored(after)
    print(
        f"   {FILES:,} files, {len(old):,} listings a tree, built in "
        f"{time.perf_counter() - started:.1f} s"
    )
    expected = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}

    reads_before, reads_after = Reads(old), Reads(new)
    started = time.perf_counter()
    changes = list(tree_changes(reads_before, reads_after))
    ours = time.perf_counter() - started
    assert {c.path for c in changes} == expected, "the diff is not the difference"
    mark = "ok" if ours <= GOAL_SECONDS else "MISSED"
    print(
        f"   tree_changes: {len(changes)} changes in {ours:.3f} s, "
        f"{reads_before.count + reads_after.count:,} listings read "
        f"(target <= {GOAL_SECONDS:g} s: {mark})"
    )

    started = time.perf_counter()
    full: dict[str, set[tuple[str, str]]] = {}
    for name, listings in (("before", old), ("after", new)):
        files = set()
        for directory, data in listings.items():
            listing = decode_checksum_file(data)
            prefix = f"{directory}/" if directory else ""
            files.update((prefix + n, f.digest) for n, f in listing.files.items())
        full[name] = files
    differ = {p for p, _ in full["before"] ^ full["after"]}
    naive = time.perf_counter() - started
    assert differ == expected
    print(
        f"   every listing of both trees read and compared: {naive:.3f} s, "
        f"{len(old) + len(new):,} listings read ({naive / ours:.0f}x the diff's time)"
    )


if __name__ == "__main__":
    main()
