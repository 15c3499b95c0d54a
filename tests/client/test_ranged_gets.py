"""A big file's ranges written in any order, in pieces of any size, hash to the file's md5 and
land at their offsets (``dandizarr.client.ranged_gets.RangedBody``); what storage sends past a
range, or after the file was given up, is refused."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import random
from pathlib import Path

import pytest

from dandizarr.client.errors import ClientError
from dandizarr.client.models import RemoteFile
from dandizarr.client.ranged_gets import RangedBody, RangedDownloads


@pytest.mark.parametrize("seed", range(20))
def test_ranges_in_any_order_hash_in_order(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    size = rng.randrange(1, 200_000)
    range_bytes = rng.randrange(1, 40_000)
    data = rng.randbytes(size)
    body = RangedBody(tmp_path / "big.part", size, range_bytes)
    # Each range a queue of pieces; a random walk takes the next piece of a random range.
    pieces: list[list[bytes]] = []
    for start, end in body.ranges:
        cuts = sorted(rng.sample(range(start + 1, end), min(3, end - start - 1)))
        bounds = [start, *cuts, end]
        pieces.append([data[a:b] for a, b in itertools.pairwise(bounds)])
    sinks = [body.sink(i) for i in range(len(body.ranges))]
    while any(pieces):
        index = rng.choice([i for i, left in enumerate(pieces) if left])
        sinks[index](pieces[index].pop(0))

    async def finished() -> bool:
        return await body.hasher.finished()

    assert asyncio.run(finished()), f"seed {seed}"
    assert body.hasher.md5.hexdigest() == hashlib.md5(data).hexdigest(), f"seed {seed}"
    body.place(tmp_path / "big")
    assert (tmp_path / "big").read_bytes() == data, f"seed {seed}"
    assert not (tmp_path / "big.part").exists()


def test_bytes_past_a_range_or_after_giving_up_are_refused(tmp_path: Path) -> None:
    body = RangedBody(tmp_path / "big.part", 10, 4)
    first = body.sink(0)
    first(b"abc")
    with pytest.raises(ClientError, match="more than bytes 0-3"):
        first(b"de")
    assert body.left(0) == (3, 4)  # a retry asks for byte 3 on
    body.discard()
    assert not (tmp_path / "big.part").exists()
    with pytest.raises(ClientError, match="abandoned"):
        first(b"d")


def test_the_plan_applies_past_the_threshold_only() -> None:
    plan = RangedDownloads(threshold=100, range_bytes=10, parallel=2)
    assert not plan.applies(RemoteFile("a", 100, "d"))
    assert plan.applies(RemoteFile("a", 101, "d"))
    with pytest.raises(ValueError):
        RangedDownloads(range_bytes=0)


@pytest.mark.parametrize("size", [-1, (5 << 40) + 1, 1 << 62])
def test_a_listed_size_no_object_can_have_is_refused_before_any_range_is_planned(
    tmp_path: Path, size: int
) -> None:
    """The size is the service's word: past S3's 5 TiB it would size lists of billions of
    ranges, so it is refused first, and no temporary file is made."""
    with pytest.raises(ClientError, match="no S3 object holds more"):
        RangedBody(tmp_path / "big.part", size, 32 << 20)
    assert not (tmp_path / "big.part").exists()
