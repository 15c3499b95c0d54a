"""The project's object store, built once from the settings, and the URLs it hands out."""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from dandizarr.objectstore import ObjectStore
from dandizarr.objectstore.local import LocalObjectStore
from dandizarr.objectstore.s3 import S3ObjectStore

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
        "DANDIZARR_S3_RETRIES",
        "DANDIZARR_STORAGE_CONCURRENCY",
        "SECRET_KEY",
        "PUBLIC_URL",
        "USER_CONTENT_URL",
    }
)

# Bytes per ranged read or streamed piece of a shard object.
STREAM_BLOCK = 8 << 20

_lock = threading.Lock()
_store: ObjectStore | None = None
_probe_stores: dict[float, ObjectStore] = {}


def build_store(*, timeout: float | None = None) -> ObjectStore:
    """A new store from the current settings; ``timeout``: each request to a remote store
    gives up after that many seconds, at its first failure (no retries)."""
    if settings.DANDIZARR_STORAGE == "s3":
        limits: dict[str, Any] = (
            {"timeout": timeout, "retries": 0}
            if timeout
            else {"retries": settings.DANDIZARR_S3_RETRIES}
        )
        return S3ObjectStore(
            settings.DANDIZARR_S3_BUCKET,
            endpoint_url=settings.DANDIZARR_S3_ENDPOINT_URL,
            region=settings.DANDIZARR_S3_REGION,
            access_key_id=settings.DANDIZARR_S3_ACCESS_KEY_ID,
            secret_access_key=settings.DANDIZARR_S3_SECRET_ACCESS_KEY,
            presign_endpoint_url=settings.DANDIZARR_S3_PRESIGN_ENDPOINT_URL,
            max_pool_connections=settings.DANDIZARR_S3_MAX_POOL_CONNECTIONS,
            concurrency=settings.DANDIZARR_STORAGE_CONCURRENCY,
            **limits,
        )
    if settings.DANDIZARR_STORAGE == "local":
        local = LocalObjectStore(
            settings.DANDIZARR_LOCAL_STORAGE_DIR,
            # The user-content origin, when the deployment has one (settings).
            public_url=settings.USER_CONTENT_URL or settings.PUBLIC_URL,
            secret_key=settings.SECRET_KEY,
        )
        # Keeping replaced objects from the start, so archive versions never wait for it
        # (docs/versions.md); the collector deletes what no version needs.
        local.enable_versioning()
        return local
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


def get_probe_store(timeout: float) -> ObjectStore:
    """A store that asks whether storage answers and gives up after ``timeout`` seconds (the
    readiness probe's): the shared store's requests wait and retry for minutes, which a probe
    must not. One per process and timeout, built on first use; a local store's requests are
    system calls, with no timeout to set: the shared store."""
    if not get_store().remote:
        return get_store()
    store = _probe_stores.get(timeout)
    if store is None:
        with _lock:
            store = _probe_stores.setdefault(timeout, build_store(timeout=timeout))
    return store


def reset_store_cache() -> None:
    global _store
    with _lock:
        _store = None
        _probe_stores.clear()


@receiver(setting_changed)
def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in _STORE_SETTINGS:
        reset_store_cache()


def presigned_puts_revocable() -> bool:
    """The local backend's endpoint asks the database before each PUT (an ended batch's URL
    is refused); S3 cannot ask, so a URL works until it expires."""
    return isinstance(get_store(), LocalObjectStore)


def download_url(key: str) -> str:
    """A presigned GET of the object, valid as long as the upload URLs are."""
    return get_store().presigned_get_url(
        key, expires_in=settings.DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS
    )


def download_urls(keys: list[str]) -> list[str]:
    """``download_url`` of many keys, signed together."""
    return get_store().presigned_get_urls(
        keys, expires_in=settings.DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS
    )


def bucket_path(prefix: str) -> str:
    """``bucket/prefix``: where a prefix lives, as S3 tools name it."""
    return f"{settings.DANDIZARR_S3_BUCKET}/{prefix}"


def prefix_url(prefix: str) -> str:
    """The unsigned URL of a key prefix at the address clients reach the store at."""
    store = get_store()
    if isinstance(store, S3ObjectStore):
        endpoint = store.presign_endpoint_url or store.endpoint_url
        if endpoint:
            return f"{endpoint.rstrip('/')}/{store.bucket}/{prefix}"
        return f"https://{store.bucket}.s3.amazonaws.com/{prefix}"
    if isinstance(store, LocalObjectStore):
        return f"{store.storage_url}/{prefix}"
    raise TypeError(f"no URLs for {store!r}")
