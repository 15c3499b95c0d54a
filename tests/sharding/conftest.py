"""Fixtures for the sharding tests: stores on memory and on a temporary directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from dandizarr.sharding.store import CountingStore, DirectoryStore, MemoryStore


@pytest.fixture
def memory_store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def directory_store(tmp_path: Path) -> DirectoryStore:
    return DirectoryStore(tmp_path / "store")


@pytest.fixture(params=["memory", "directory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> MemoryStore | DirectoryStore:
    if request.param == "memory":
        return MemoryStore()
    return DirectoryStore(tmp_path / "store")


@pytest.fixture
def counting_store(store: MemoryStore | DirectoryStore) -> CountingStore:
    return CountingStore(store)
