"""The project's object store, built once from the settings."""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from objectstore import ObjectStore

# Settings the store is built from; changing any of them (tests) drops the cached store.
_STORE_SETTINGS = frozenset(
    {
        "DANDIZARR_STORAGE",
        "DANDIZARR_LOCAL_STORAGE_DIR",
        "DANDIZARR_S3_BUCKET",
        "DANDIZARR_S3_REGION",
        "DANDIZARR_S3_ENDPOINT_URL",
        "DANDIZARR_S3_PRESIGN_ENDPOINT_URL",
        "DANDIZARR_S3_ACCESS_KEY_ID",
        "DANDIZARR_S3_SECRET_ACCESS_KEY",
        "DANDIZARR_S3_MAX_POOL_CONNECTIONS",
        "SECRET_KEY",
        "PUBLIC_URL",
    }
)

_lock = threading.Lock()
_store: ObjectStore | None = None


def build_store() -> ObjectStore:
    """A new store from the current settings."""
    if settings.DANDIZARR_STORAGE == "s3":
        from objectstore.s3 import S3ObjectStore

        return S3ObjectStore(
            settings.DANDIZARR_S3_BUCKET,
            endpoint_url=settings.DANDIZARR_S3_ENDPOINT_URL,
            region=settings.DANDIZARR_S3_REGION,
            access_key_id=settings.DANDIZARR_S3_ACCESS_KEY_ID,
            secret_access_key=settings.DANDIZARR_S3_SECRET_ACCESS_KEY,
            presign_endpoint_url=settings.DANDIZARR_S3_PRESIGN_ENDPOINT_URL,
            max_pool_connections=settings.DANDIZARR_S3_MAX_POOL_CONNECTIONS,
        )
    if settings.DANDIZARR_STORAGE == "local":
        from objectstore.local import LocalObjectStore

        return LocalObjectStore(
            settings.DANDIZARR_LOCAL_STORAGE_DIR,
            public_url=settings.PUBLIC_URL,
            secret_key=settings.SECRET_KEY,
        )
    raise ValueError(f"unknown DANDIZARR_STORAGE {settings.DANDIZARR_STORAGE!r}")


def get_store() -> ObjectStore:
    """The shared store (its clients are thread-safe); built on first use."""
    global _store
    store = _store
    if store is None:
        with _lock:
            if _store is None:
                _store = build_store()
            store = _store
    return store


def reset_store_cache() -> None:
    global _store
    with _lock:
        _store = None


@receiver(setting_changed)
def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in _STORE_SETTINGS:
        reset_store_cache()
