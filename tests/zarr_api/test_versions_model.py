"""The versions model (tests/support/versions_model.py) on ``make serve``'s configuration: the
local store (hard links keep what the draft replaces), tasks run inline, one process. A few
seeded walks of a few steps; ``make versions-model`` runs long ones in the production shape
(tests/production/test_versions_model_live.py). ``VERSIONS_MODEL_SEEDS`` (comma-separated) and
``VERSIONS_MODEL_STEPS`` choose others.

The walk with write sessions (tests/support/session_model.py) interleaved, their rules drawn
three times as often as the walk's: ``SESSION_MODEL_SEEDS`` and ``SESSION_MODEL_STEPS``."""

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

SEEDS = [int(s) for s in os.environ.get("VERSIONS_MODEL_SEEDS", "5,6").split(",")]
STEPS = int(os.environ.get("VERSIONS_MODEL_STEPS", "18"))
SESSION_SEEDS = [int(s) for s in os.environ.get("SESSION_MODEL_SEEDS", "48").split(",")]
SESSION_STEPS = int(os.environ.get("SESSION_MODEL_STEPS", "24"))
# Seed 11 of the walk without sessions gave its time to this one (docs/testing.md's budget).


@pytest.mark.parametrize("seed", SEEDS)
def test_every_version_reads_as_the_model_after_every_step(
    owner: Actor, local_storage: str, settings: Any, seed: int
) -> None:
    walk_settings(settings)
    ensure_storage_versioning()
    api = DjangoApi(owner.client)
    harness = in_process_harness(api, DjangoApi(APIClient()), sessions=False)
    VersionsWalk(harness, seed, max_versions=4, log=print).run(STEPS)


@pytest.mark.parametrize("seed", SESSION_SEEDS)
def test_write_sessions_interleaved_with_the_walk_read_as_the_model(
    owner: Actor, local_storage: str, settings: Any, seed: int
) -> None:
    walk_settings(settings)
    ensure_storage_versioning()
    api = DjangoApi(owner.client)
    token = Token.objects.get(user=owner.user).key
    # Sessions read through ArchiveStore too, over HTTP to the live server (local_storage's).
    harness = in_process_harness(api, DjangoApi(APIClient()), url=local_storage, token=token)
    walk = VersionsWalk(harness, seed, max_versions=3, log=print, session_weight=3)
    walk.run(SESSION_STEPS)
    assert walk.sessions is not None
    print(f"seed {seed}: {walk.sessions.tally()}")
