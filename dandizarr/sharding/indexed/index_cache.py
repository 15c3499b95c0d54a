"""An LRU of decoded shard indexes, so a partial read of a shard costs one request."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from dandizarr.sharding.index import ShardIndex

__all__ = ["IndexCache"]


@dataclass
class IndexCache:
    """LRU of decoded shard indexes, each tagged with the store version it was read at.

    A cached index is only ever used together with a read conditioned on that version, so an
    entry for a rewritten shard costs one failed request, never stale data.
    """

    maxsize: int = 4096
    _entries: OrderedDict[str, tuple[str, ShardIndex]] = field(
        default_factory=OrderedDict, repr=False
    )
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def get(self, key: str) -> tuple[str, ShardIndex] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: str, version: str, index: ShardIndex) -> None:
        with self._lock:
            self._entries[key] = (version, index)
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def drop(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)
