"""The local sources the uploaders upload: each a Zarr v2 array of raw 4 KiB chunks (nested
keys ``row/col``) that grows by a few rows of chunks before each upload and has a few of its
chunks rewritten, so every upload adds files and overwrites some (a packed archive's
overwrites leave dead bytes in shards for compaction)."""

from __future__ import annotations

import random
from pathlib import Path

from bench.arrays import row_chunked_zarray

CHUNK_BYTES = 4096
COLUMNS = 16  # chunks per row
ROWS = 100_000  # the array's declared rows: never the limit of a run


class ArraySource:
    """A Zarr v2 array at ``root`` whose chunks are written row by row."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.rows = 0
        if not (root / ".zarray").exists():
            root.mkdir(parents=True, exist_ok=True)
            (root / ".zarray").write_text(row_chunked_zarray(ROWS, COLUMNS, CHUNK_BYTES))
            (root / ".zattrs").write_text("{}")
        else:
            self.rows = sum(1 for p in root.iterdir() if p.is_dir())

    def paths(self) -> list[str]:
        """Every chunk file's path in the archive."""
        return [f"{r}/{c}" for r in range(self.rows) for c in range(COLUMNS)]

    def grow(self, rng: random.Random, add: int, overwrite: int) -> None:
        """``add`` more chunks (whole rows: ``add`` rounded up to a row), then ``overwrite``
        existing ones with new bytes."""
        existing = self.paths()
        for _ in range(max(1, -(-add // COLUMNS))):
            row = self.root / str(self.rows)
            row.mkdir()
            for c in range(COLUMNS):
                (row / str(c)).write_bytes(rng.randbytes(CHUNK_BYTES))
            self.rows += 1
        for path in rng.sample(existing, min(overwrite, len(existing))):
            (self.root / path).write_bytes(rng.randbytes(CHUNK_BYTES))
