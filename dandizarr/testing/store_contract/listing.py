"""The listing contract: key order, prefixes, ``start_after``, pages (base.ObjectStore.list)."""

from __future__ import annotations

import pytest

from dandizarr.objectstore.base import (
    ListingOrderError,
    ObjectInfo,
    ObjectStore,
)
from dandizarr.testing.store_contract.support import (
    LISTED_KEYS,
    ContractBase,
    keys_of,
    md5,
)


class ListingContract(ContractBase):
    """Listings: every key once, in byte order where the store lists so."""

    def test_list_every_key_once_in_order(self, store: ObjectStore) -> None:
        self.put_listed_keys(store)
        listed = list(store.list("p/"))
        self.assert_listing(keys_of(listed), LISTED_KEYS)
        assert all(
            info == ObjectInfo(info.key, len(info.key.encode()), md5(info.key.encode()))
            for info in listed
        )
        # The empty prefix is every key.
        self.assert_listing(keys_of(store.list()), sorted([*LISTED_KEYS, "other/x"]))
        self.assert_listing(keys_of(store.list("")), sorted([*LISTED_KEYS, "other/x"]))

    def test_list_sorted_is_byte_order(self, store: ObjectStore) -> None:
        self.put_listed_keys(store)
        assert keys_of(store.list_sorted("p/")) == LISTED_KEYS
        assert keys_of(store.list_sorted()) == sorted([*LISTED_KEYS, "other/x"])
        assert store.list_sorted("p/a/")[0] == ObjectInfo("p/a/b", 5, md5(b"p/a/b"))
        assert store.list_sorted("nothing/") == []

    def test_list_ordered_streams_byte_order_or_says_it_cannot(self, store: ObjectStore) -> None:
        self.put_listed_keys(store)
        if self.lists_in_byte_order:
            assert keys_of(store.list_ordered("p/")) == LISTED_KEYS
            return
        streamed: list[str] = []
        with pytest.raises(ListingOrderError) as raised:
            streamed.extend(info.key for info in store.list_ordered("p/"))
        # Everything yielded before the error was in byte order; the error names both keys.
        assert streamed == sorted(streamed) and streamed
        assert raised.value.key < raised.value.previous
        assert repr(raised.value.key) in str(raised.value)

    def test_list_prefix_is_a_string_prefix(self, store: ObjectStore) -> None:
        self.put_listed_keys(store)

        def listed(prefix: str) -> list[str]:
            return keys_of(store.list(prefix))

        self.assert_listing(listed("p/a"), LISTED_KEYS[1:7])
        self.assert_listing(listed("p/a."), ["p/a.b"])
        assert listed("p/a/") == ["p/a/b", "p/a/c/d"]
        assert listed("p/a/c/d") == ["p/a/c/d"]
        assert listed("p/nothing") == []
        assert listed("nothing/") == []

    def test_list_start_after(self, store: ObjectStore) -> None:
        self.put_listed_keys(store)

        def keys(start_after: str, prefix: str = "p/") -> list[str]:
            return keys_of(store.list(prefix, start_after=start_after))

        assert keys("p/\U0001f600") == []
        assert keys("a") == keys_of(store.list("p/"))  # before the prefix
        assert keys("p/é") == LISTED_KEYS[9:]  # past every directory: the orders agree
        if not self.lists_in_byte_order:
            # A position in the server's own walk: only ever fewer keys, never foreign ones.
            for start_after in ["p/a/b", "p/a/c", "p/a/", "p/a-a"]:
                listed = keys(start_after)
                assert set(listed) < set(LISTED_KEYS) and len(set(listed)) == len(listed)
            return
        assert keys("p/a/b") == LISTED_KEYS[4:]
        # Not itself a key, and inside a "directory": its later siblings still come.
        assert keys("p/a/c") == LISTED_KEYS[4:]
        assert keys("p/a/") == LISTED_KEYS[3:]
        assert keys("p/a-a") == LISTED_KEYS[1:]
        assert keys("p/a-b") == LISTED_KEYS[2:]
        assert keys("", prefix="") == sorted([*LISTED_KEYS, "other/x"])
        assert keys("p/a/b", prefix="p/a/") == ["p/a/c/d"]

    def test_list_pagination(self, store: ObjectStore) -> None:
        self.put_listed_keys(store)
        whole = keys_of(store.list("p/"))
        assert keys_of(store.list("p/", page_size=3)) == whole
        after_a0 = keys_of(store.list("p/", start_after="p/a0", page_size=2))
        assert after_a0 == ["p/ab", "p/z", "p/é", "p/\uffff", "p/\U0001f600"]
