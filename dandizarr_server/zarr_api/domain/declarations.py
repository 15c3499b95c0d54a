"""Typed values the batch services take: files and shards as a client declares them (parsed
from request bodies by ``dandizarr_server.zarr_api.parsers``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)  # one per file: no __dict__
class FileDeclaration:
    """A file of a loose upload batch: where it goes and the md5 its PUT must carry; a big
    file also declares its size and each part's md5 (docs/api.md, "Big files")."""

    path: str
    md5: str
    size: int | None = None
    part_md5s: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)  # one per file: no __dict__
class MemberDeclaration:
    """A file packed in a shard: its bytes at ``offset`` (and its inner chunk ``slot``)."""

    path: str
    md5: str
    size: int
    offset: int
    slot: int | None


@dataclass(frozen=True)
class ShardDeclaration:
    name: str
    md5: str
    size: int
    members: tuple[MemberDeclaration, ...]
    chunks_per_shard: list[int] | None = None
