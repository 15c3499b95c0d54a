"""Typed values the batch services take: files and shards as a client declares them (parsed
from request bodies by ``dandizarr_server.zarr_api.parsers``)."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed


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


@dataclass(frozen=True, slots=True)
class DeclaredInParts:
    """What files sent in parts declare: their bytes and their parts (the caps below)."""

    bytes: int = 0
    parts: int = 0

    def __add__(self, other: DeclaredInParts) -> DeclaredInParts:
        return DeclaredInParts(self.bytes + other.bytes, self.parts + other.parts)


def check_declared_in_parts(batch: DeclaredInParts, account_bytes: int) -> None:
    """The caps on what files sent in parts may declare: ``batch``, what one open batch would
    hold once the request is taken, and ``account_bytes``, what the account's open batches
    would hold together (this one included). A declaration past one is refused whole (400
    ``declared_too_large``), before anything is opened: storage's uploads, the rows of every
    part's md5 and the URLs handed out all stay within them (docs/api.md, "Big files")."""
    limits = (
        ("bytes in parts in one batch", batch.bytes, settings.DANDIZARR_BATCH_DECLARED_BYTES_LIMIT),
        ("parts in one batch", batch.parts, settings.DANDIZARR_BATCH_DECLARED_PARTS_LIMIT),
        (
            "bytes in parts in your open batches",
            account_bytes,
            settings.DANDIZARR_ACCOUNT_DECLARED_BYTES_LIMIT,
        ),
    )
    for what, declared, limit in limits:
        if declared > limit:
            raise ValidationFailed(
                f"the files declared in parts would make {declared} {what}; at most {limit} "
                "are allowed (complete or cancel open batches, or send fewer files at once)",
                code="declared_too_large",
            )
