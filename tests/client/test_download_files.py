"""How a download cuts packed files into runs of one byte range, and hands each file its
share of a run's bytes (``dandizarr.client.download_files``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from dandizarr.client.download_files import RUN_FILES, Body, shard_runs, splitter
from dandizarr.client.models import RemoteFile


def _packed(path: str, offset: int, size: int, shard: str = "s1") -> RemoteFile:
    return RemoteFile(path, size, "d", download_url=shard, shard_offset=offset)


def test_runs_join_packed_neighbours_only() -> None:
    files = [
        _packed("a", 0, 10),
        _packed("b", 10, 5),
        _packed("c", 15, 0),  # empty: alone
        _packed("d", 15, 7),
        _packed("e", 30, 3),  # a gap before it
        _packed("f", 33, 3, shard="s2"),  # another shard
        RemoteFile("g", 4, "d", download_url="loose"),
        _packed("h", 36, 3, shard="s2"),
    ]
    runs = [[f.path for f in run] for run in shard_runs(files)]
    assert runs == [["a", "b"], ["c"], ["d"], ["e"], ["f"], ["g"], ["h"]]
    many = [_packed(str(i), i, 1) for i in range(RUN_FILES + 1)]
    assert [len(run) for run in shard_runs(many)] == [RUN_FILES, 1]


def test_the_splitter_gives_each_body_its_bytes(tmp_path: Path) -> None:
    parts = [b"x" * 3, b"yy", b"z" * 6]
    bodies = [Body(tmp_path / f"t{i}") for i in range(3)]
    feed = splitter(bodies, [len(p) for p in parts])
    data = b"".join(parts) + b"!"  # one byte too many: the last body's size tells
    for start in range(0, len(data), 4):
        feed(data[start : start + 4])
    assert [b.md5.hexdigest() for b in bodies[:2]] == [
        hashlib.md5(p).hexdigest() for p in parts[:2]
    ]
    assert [b.size for b in bodies] == [3, 2, 7]
    bodies[0].place(tmp_path / "placed")
    assert (tmp_path / "placed").read_bytes() == parts[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["placed"]
