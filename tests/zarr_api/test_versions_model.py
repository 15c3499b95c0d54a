"""The versions model (tests/support/versions_model.py) on ``make serve``'s configuration: the
local store (hard links keep what the draft replaces), tasks run inline, one process. A few
seeded walks of a few steps; ``make versions-model`` runs long ones in the production shape
(tests/production/test_versions_model_live.py). ``VERSIONS_MODEL_SEEDS`` (comma-separated) and
``VERSIONS_MODEL_STEPS`` choose others."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from dandizarr_server.zarr_api.models import Shard, ZarrArchive
from dandizarr_server.zarr_api.services.compaction import shard_compact
from dandizarr_server.zarr_api.services.garbage import archive_garbage_collect
from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning
from tests.support.api import Actor
from tests.support.model_api import DjangoApi
from tests.support.versions_model import Harness, VersionsWalk

SEEDS = [int(s) for s in os.environ.get("VERSIONS_MODEL_SEEDS", "1,5,11").split(",")]
STEPS = int(os.environ.get("VERSIONS_MODEL_STEPS", "18"))


def in_process_harness(owner: Actor) -> Harness:
    """The walk's harness in this process: requests through Django's test client, garbage
    collection and compaction called directly, every task already done when a request ends."""

    def collect_garbage(zarr_id: str) -> None:
        archive_garbage_collect(ZarrArchive.objects.get(zarr_id=zarr_id), dry_run=False)

    def compact(zarr_id: str) -> None:
        live = Shard.objects.filter(archive__zarr_id=zarr_id, state=Shard.State.LIVE)
        for pk in live.values_list("pk", flat=True):
            shard_compact(pk)

    def wait(ready: Callable[[], bool], what: str) -> None:
        assert ready(), f"not done when the request ended: {what}"

    reader = DjangoApi(owner.client)
    return Harness(reader, [reader], DjangoApi(APIClient()), collect_garbage, compact, wait)


def walk_settings(settings: Any) -> None:
    """No undelete window, compaction at the first dead byte, and rates no walk reaches (each
    step reads every version's listings)."""
    settings.DANDIZARR_GC_WINDOW_DAYS = 0
    settings.DANDIZARR_SHARD_COMPACT_PERCENT = 1
    rates = {
        **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
        "expensive_user": "100000/min",
        "expensive_anon": "100000/min",
        "publishes": "100000/hour",
    }
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}


@pytest.mark.parametrize("seed", SEEDS)
def test_every_version_reads_as_the_model_after_every_step(
    owner: Actor, local_storage: str, settings: Any, seed: int
) -> None:
    walk_settings(settings)
    ensure_storage_versioning()
    VersionsWalk(in_process_harness(owner), seed, max_versions=4, log=print).run(STEPS)
