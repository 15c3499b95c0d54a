"""The contract's shared parts: the keys it lists, its flags, fixture and hooks."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from dandizarr.objectstore.base import ObjectStore

DIGITS = b"0123456789"

# Chosen so UTF-8 byte order differs from UTF-16 order (U+FFFF vs U+1F600), from a directory
# walk's order ('/' sorts between '-' and '0', '.' between them: "p/a-b" < "p/a.b" < "p/a/b" <
# "p/a0"), and so a page boundary falls on U+FFFF (SeaweedFS repeats that key on the next page).
LISTED_KEYS = [
    "p/A",
    "p/a-b",
    "p/a.b",
    "p/a/b",
    "p/a/c/d",
    "p/a0",
    "p/ab",
    "p/z",
    "p/é",
    "p/\uffff",
    "p/\U0001f600",
]


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def keys_of(infos: Any) -> list[str]:
    return [info.key for info in infos]


class ContractBase:
    """What every part of the contract shares: the flags, the ``store`` fixture, the hooks."""

    # Whether ``list`` streams in UTF-8 byte order and reads ``start_after`` as a position in
    # it (S3, local, memory). SeaweedFS lists directory by directory: such a store must still
    # list every key once, and ``list_ordered`` must say it cannot stream byte order.
    lists_in_byte_order: ClassVar[bool] = True
    # Whether a DELETE leaves a delete marker among the versions (S3 and memory; the local
    # backend keeps the replaced file and lists no marker).
    writes_delete_markers: ClassVar[bool] = True

    @pytest.fixture
    def store(self) -> ObjectStore:
        """A fresh, empty store (a backend's test class overrides this)."""
        raise NotImplementedError("a StoreContract subclass provides the store fixture")

    def put_bulk(self, store: ObjectStore, items: Mapping[str, bytes]) -> None:
        """Store many objects for a test whose subject is reading them (a backend may do it
        faster than ``put_many``: moto's model directly)."""
        store.put_many(items)

    def put_listed_keys(self, store: ObjectStore) -> None:
        for key in reversed(LISTED_KEYS):
            store.put(key, key.encode())
        store.put("other/x", b"not under p/")

    def assert_listing(self, listed: list[str], expected: list[str]) -> None:
        """``listed`` is ``expected``: exactly, on a byte-order store; else each key once."""
        if self.lists_in_byte_order:
            assert listed == expected
        else:
            assert sorted(listed) == expected and len(set(listed)) == len(listed)
