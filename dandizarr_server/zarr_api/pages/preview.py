"""A picture of an array: its middle 2-D plane as a greyscale PNG, scaled to the data's range
and to at most PREVIEW_SIDE pixels (an OME image: its channels in their colours and display
windows), cached per tree version of the archive."""

from __future__ import annotations

import hashlib
import io
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

import numpy as np
from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError
from PIL import Image

from dandizarr.objectstore import ObjectStoreError
from dandizarr.ome.preview_choice import ChannelDraw
from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.pages.render_pool import RendererBusy
from dandizarr_server.zarr_api.runtime.tree import tree_version

PREVIEW_SIDE = 512
# A preview the backstop refused (``drawn``): a reader's bug, not the metadata's refusal.
CANNOT_DRAW = "this picture cannot be drawn"
# Cached previews and array lists outlive no tree version (the key holds it) and a day.
CACHE_SECONDS = 24 * 3600
# Single flight (``cached``): how long a computing request's lock lasts at most (it is dropped
# when the computation ends), and how often a waiting request looks for the outcome.
FLIGHT_SECONDS = 120
FLIGHT_POLL_SECONDS = 0.05

T = TypeVar("T")
logger = logging.getLogger(__name__)


def preview_size(height: int, width: int) -> tuple[int, int]:
    """(width, height) of the picture: the longer side PREVIEW_SIDE, the aspect kept."""
    scale = PREVIEW_SIDE / max(height, width)
    return max(1, round(width * scale)), max(1, round(height * scale))


def to_grey(plane: np.ndarray) -> np.ndarray:
    """uint8 of the plane, its finite minimum black and maximum white (NaN black)."""
    values = np.abs(plane) if plane.dtype.kind == "c" else plane
    values = values.astype(np.float64)
    finite = np.isfinite(values)
    if not finite.any():
        return np.zeros(values.shape, np.uint8)
    low, high = float(values[finite].min()), float(values[finite].max())
    span = high - low or 1.0
    scaled = np.where(finite, (values - low) * (255.0 / span), 0.0)
    return np.clip(np.rint(scaled), 0, 255).astype(np.uint8)


def render_png(plane: np.ndarray) -> bytes:
    height, width = plane.shape
    return png_of(Image.fromarray(to_grey(plane), mode="L"), height, width)


def png_of(image: Image.Image, height: int, width: int) -> bytes:
    """The picture at the preview's size, as PNG."""
    size = preview_size(height, width)
    # Enlarged pixels stay sharp squares; reductions average (no aliasing).
    shrink = size[0] < width
    image = image.resize(size, Image.Resampling.BOX if shrink else Image.Resampling.NEAREST)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def version_tag(archive: ZarrArchive) -> str:
    """A short name of the archive's tree version (an ETag, a cache key part)."""
    version: Hashable = (
        ("version", str(archive.as_of.version_id))
        if archive.as_of is not None
        else tree_version(archive.modified, archive.checksum)
    )
    return hashlib.sha256(repr((str(archive.zarr_id), version)).encode()).hexdigest()[:32]


def cached(archive: ZarrArchive, kind: str, name: str, compute: Callable[[], T]) -> T:
    """``compute()`` once per tree version of ``archive``, in Django's cache (shared by every
    process when DANDIZARR_CACHE_URL names one). Single flight: while one request computes,
    identical requests wait for its outcome (a lock taken with the cache's atomic ``add``)
    instead of computing it again; one that waits past DANDIZARR_PREVIEW_WAIT_SECONDS is
    ``RendererBusy`` (503). A holder that dies leaves its lock for FLIGHT_SECONDS at most."""
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    key = f"dandizarr:{kind}:{version_tag(archive)}:{digest}"
    hit = cache.get(key)
    if hit is not None:
        return hit[0]
    lock = key + ":computing"
    deadline = time.monotonic() + settings.DANDIZARR_PREVIEW_WAIT_SECONDS
    while not cache.add(lock, 1, FLIGHT_SECONDS):
        if time.monotonic() > deadline:
            raise RendererBusy(retry_after=2)
        time.sleep(FLIGHT_POLL_SECONDS)
        hit = cache.get(key)
        if hit is not None:
            return hit[0]
    try:
        hit = cache.get(key)  # computed between our miss and our lock
        if hit is None:
            hit = (compute(),)
            cache.set(key, hit, CACHE_SECONDS)
    finally:
        cache.delete(lock)
    return hit[0]


def drawn(draw: Callable[[], bytes | str]) -> bytes | str:
    """What ``draw`` makes (a picture, or why there is none): the outcome ``cached`` keeps. A
    refusal while reading (a ValueError: Unsupported metadata, ShardFormatError,
    ReadBudgetExceeded) says why. A failure of what the service runs on (storage, the
    database, the render slots) propagates, uncached. Anything else is a reader's bug: the
    backstop's "cannot be drawn", logged, cached like any refusal, never a 500."""
    try:
        return draw()
    except ValueError as error:
        return str(error) or type(error).__name__
    except (ObjectStoreError, RendererBusy, OSError, DatabaseError):
        raise
    except Exception as error:
        logger.warning("a preview cannot be drawn", exc_info=True)
        return f"{CANNOT_DRAW} ({type(error).__name__})"


def _scaled(plane: np.ndarray, window: tuple[float, float] | None) -> np.ndarray:
    """float32 of the plane in [0, 1]: its window (else its finite range) stretched."""
    values = np.abs(plane) if plane.dtype.kind == "c" else plane
    values = values.astype(np.float32)
    finite = np.isfinite(values)
    if window is None:
        if not finite.any():
            return np.zeros(values.shape, np.float32)
        window = (float(values[finite].min()), float(values[finite].max()))
    low, high = window
    span = (high - low) or 1.0
    return np.clip(np.where(finite, (values - low) / span, 0.0), 0.0, 1.0).astype(np.float32)


def render_channels_png(planes: Sequence[np.ndarray], channels: Sequence[ChannelDraw]) -> bytes:
    """An RGB PNG of one plane per channel, each in its colour and display window, added."""
    height, width = planes[0].shape
    rgb = np.zeros((height, width, 3), np.float32)
    for plane, channel in zip(planes, channels, strict=True):
        rgb += _scaled(plane, channel.window)[..., None] * (
            np.asarray(channel.color, np.float32) / 255.0
        )
    pixels = np.clip(np.rint(rgb * 255.0), 0, 255).astype(np.uint8)
    return png_of(Image.fromarray(pixels, mode="RGB"), height, width)
