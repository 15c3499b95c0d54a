"""The versions model (tests/support/versions_model.py) on ``make serve``'s configuration: the
local store (hard links keep what the draft replaces), tasks run inline, one process. A few
seeded walks of a few steps; ``make versions-model`` runs long ones in the production shape
(tests/production/test_versions_model_live.py). ``VERSIONS_MODEL_SEEDS`` (comma-separated) and
``VERSIONS_MODEL_STEPS`` choose others."""

from __future__ import annotations

import os
from typing import Any

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning
from tests.support.api import Actor
from tests.support.model_api import DjangoApi
from tests.support.versions_model import VersionsWalk, in_process_harness, walk_settings

SEEDS = [int(s) for s in os.environ.get("VERSIONS_MODEL_SEEDS", "5,6,11").split(",")]
STEPS = int(os.environ.get("VERSIONS_MODEL_STEPS", "18"))


@pytest.mark.parametrize("seed", SEEDS)
def test_every_version_reads_as_the_model_after_every_step(
    owner: Actor, local_storage: str, settings: Any, seed: int
) -> None:
    walk_settings(settings)
    ensure_storage_versioning()
    api = DjangoApi(owner.client)
    token = Token.objects.get(user=owner.user).key
    # Sessions read through ArchiveStore too, over HTTP to the live server (local_storage's).
    harness = in_process_harness(api, DjangoApi(APIClient()), url=local_storage, token=token)
    VersionsWalk(harness, seed, max_versions=4, log=print).run(STEPS)
