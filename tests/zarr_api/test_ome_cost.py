"""A stranger's OME archive costs a bounded amount once per tree version, however many ask:
the metadata validated per description is bounded (dandizarr.ome.validation's budget, the
scan's MAX_VALIDATED_BYTES), an image group listing many images is validated once, and
identical concurrent requests wait for one computation (single flight) instead of each
computing it. Figures before and after: ``python -m bench ome_flood``."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from dandizarr.ome import describe
from dandizarr.ome.validation import validate
from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.pages import preview
from dandizarr_server.zarr_api.pages.render_pool import RendererBusy
from tests.support.api import Actor, upload
from tests.support.single_flight import Gate, wait_until


def _image_attrs(images: int, channels: int) -> dict[str, Any]:
    axes = [{"name": "c", "type": "channel"}, {"name": "y", "type": "space"}]
    axes.append({"name": "x", "type": "space"})
    multiscale = {
        "version": "0.4",
        "axes": axes,
        "datasets": [
            {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 1, 1]}]}
        ],
    }
    omero = {
        "channels": [
            {
                "label": f"channel {i}",
                "color": "00FF00",
                "window": {"start": 0, "end": 9, "min": 0, "max": 9},
            }
            for i in range(channels)
        ]
    }
    images_json = [{**multiscale, "name": f"image {i}"} for i in range(images)]
    return {"multiscales": images_json, "omero": omero}


LEVEL = {
    "zarr_format": 2, "shape": [1, 8, 8], "chunks": [1, 8, 8], "dtype": "|u1",
    "compressor": None, "fill_value": 0, "order": "C", "filters": None,
}  # fmt: skip


def _documents(groups: int, images: int, channels: int) -> dict[str, Any]:
    docs: dict[str, Any] = {".zgroup": {"zarr_format": 2}}
    for g in range(groups):
        docs[f"g{g}/.zgroup"] = {"zarr_format": 2}
        docs[f"g{g}/.zattrs"] = _image_attrs(images, channels)
        docs[f"g{g}/0/.zarray"] = LEVEL
    return docs


def test_validation_stops_at_its_budget_and_says_what_it_did_not_check() -> None:
    docs = _documents(groups=3, images=1, channels=8_000)
    size = len(json.dumps(docs["g0/.zattrs"]))
    summary = validate(docs, describe(docs), max_bytes=2 * size + size // 2)
    verdicts = {v.path: v for v in summary.validations}
    assert verdicts["g0"].valid and verdicts["g1"].valid
    assert not verdicts["g2"].valid
    assert "not checked" in verdicts["g2"].errors[0].message
    # Without a budget (the client's check of its own files) everything is checked.
    assert all(v.valid for v in validate(docs, describe(docs)).validations)


def test_a_group_of_many_images_is_validated_once() -> None:
    docs = _documents(groups=1, images=61, channels=2_000)
    size = len(json.dumps(docs["g0/.zattrs"]))
    summary = validate(docs, describe(docs), max_bytes=2 * size)
    assert len(summary.images) == 61
    assert all(v.valid for v in summary.validations), "61 images of one group: one validation"


@pytest.fixture(params=["locmem", "redis"])
def shared_cache(request: pytest.FixtureRequest, settings: Any) -> str:
    """The cache single flight runs through: one process's, or Redis (every process's)."""
    if request.param == "redis":
        settings.CACHES = {
            "default": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": os.environ.get("DANDIZARR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
                "KEY_PREFIX": f"single-flight-{os.getpid()}",
            }
        }
    from django.core.cache import cache

    cache.clear()
    return str(request.param)


class _ObservedCache:
    """The cache itself, noting each thread that found a computation's lock taken: from then
    on it waits for that computation (the single flight's waiting)."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.waiting: set[int] = set()

    def add(self, *args: Any, **kwargs: Any) -> bool:
        added = bool(self._real.add(*args, **kwargs))
        if not added:
            self.waiting.add(threading.get_ident())
        return added

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


REQUESTS = 4


def test_identical_concurrent_requests_compute_once(
    shared_cache: str,
    owner: Actor,
    zarr_id: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each request is held where it either computes or waits, and the computation goes on
    only once all are accounted for: without single flight, REQUESTS computations every run
    (before, released at once, a late request found the outcome cached and the test passed
    without single flight in some runs)."""
    archive = ZarrArchive.objects.get(zarr_id=zarr_id)
    observed = _ObservedCache(preview.cache)
    monkeypatch.setattr(preview, "cache", observed)
    gate = Gate(tmp_path / "gate")
    compute = gate.hold(lambda: "the outcome")
    outcomes: list[str] = []
    threads = [
        threading.Thread(
            target=lambda: outcomes.append(preview.cached(archive, "overview", "", compute))
        )
        for _ in range(REQUESTS)
    ]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: gate.entered() + len(observed.waiting), REQUESTS)
    finally:
        gate.release()
        for thread in threads:
            thread.join(30)
    assert outcomes == ["the outcome"] * REQUESTS
    assert gate.entered() == 1, f"{gate.entered()} computations for {REQUESTS} identical requests"


def test_a_request_waiting_too_long_for_another_is_told_to_retry(
    shared_cache: str, owner: Actor, zarr_id: str, settings: Any
) -> None:
    settings.DANDIZARR_PREVIEW_WAIT_SECONDS = 0
    archive = ZarrArchive.objects.get(zarr_id=zarr_id)
    started, release = threading.Event(), threading.Event()

    def compute() -> str:
        started.set()
        assert release.wait(30)
        return "late"

    holder = threading.Thread(target=lambda: preview.cached(archive, "overview", "", compute))
    holder.start()
    try:
        assert started.wait(30)
        with pytest.raises(RendererBusy):
            preview.cached(archive, "overview", "", lambda: "again")
    finally:
        release.set()
        holder.join(30)


def test_the_views_answer_503_while_a_description_is_being_made(
    owner: Actor, zarr_id: str, settings: Any
) -> None:
    settings.DANDIZARR_PREVIEW_WAIT_SECONDS = 0
    assert upload(owner.client, zarr_id, {".zgroup": b'{"zarr_format": 2}'}).status_code == 200
    archive = ZarrArchive.objects.get(zarr_id=zarr_id)
    started, release = threading.Event(), threading.Event()

    def compute() -> Any:
        started.set()
        assert release.wait(30)
        raise RuntimeError("not used")

    holder = threading.Thread(
        target=lambda: _ignore(preview.cached, archive, "overview", "", compute)
    )
    holder.start()
    try:
        assert started.wait(30)
        for url in (f"/api/zarr/{zarr_id}/ome/", f"/archives/{zarr_id}/"):
            response = Client().get(url)
            assert response.status_code == 503, (url, response.status_code)
            assert response["Retry-After"]
            assert "busy" in response.json()["detail"]
    finally:
        release.set()
        holder.join(30)


def _ignore(function: Any, *args: Any) -> None:
    with contextlib.suppress(RuntimeError):
        function(*args)
