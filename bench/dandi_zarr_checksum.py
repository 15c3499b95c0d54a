"""dandi's ``zarr_checksum`` over a listing file, run in ``.venv-dandi`` by
``bench_listing_checksum``: ``python bench/dandi_zarr_checksum.py LISTING`` prints the digest.

The listing's 'path<TAB>size<TAB>md5' lines become the package's own file objects
(``ZarrArchiveFile``) and its own ``compute_zarr_checksum`` hashes the tree.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

from zarr_checksum import compute_zarr_checksum
from zarr_checksum.generators import ZarrArchiveFile


def files(listing: str) -> Iterator[ZarrArchiveFile]:
    with open(listing, encoding="utf-8") as lines:
        for line in lines:
            path, size, md5 = line.rstrip("\n").split("\t")
            yield ZarrArchiveFile(path=Path(path), size=int(size), digest=md5)


if __name__ == "__main__":
    print(compute_zarr_checksum(files(sys.argv[1])).digest)
