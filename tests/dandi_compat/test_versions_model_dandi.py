"""The newest dandi CLI, unmodified, downloads the draft and every published version of a
versions-model walk's last state exactly (issue #36; tests/support/versions_model.py), on the
live test server over HTTP: the local store (``make serve``'s) and SeaweedFS. The long walk in
the production shape ends the same way (tests/production/test_versions_model_live.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning
from tests.support.dandi import DandiService
from tests.support.model_api import HttpApi
from tests.support.versions_model import (
    VersionsWalk,
    assert_every_version_downloads,
    in_process_harness,
    walk_settings,
)

pytestmark = pytest.mark.live  # runs the real dandi CLI against a live service

SEED = int(os.environ.get("VERSIONS_MODEL_SEED", "5"))
STEPS = int(os.environ.get("VERSIONS_MODEL_STEPS", "16"))


@pytest.mark.parametrize("dandi_service", ["local"], indirect=True)
def test_dandi_downloads_every_version_of_a_model_walk_exactly(
    dandi_service: DandiService, tmp_path: Path, settings: Any
) -> None:
    walk_settings(settings)
    ensure_storage_versioning()
    api = HttpApi(dandi_service.url, dandi_service.token)
    walk = VersionsWalk(
        in_process_harness(api, HttpApi(dandi_service.url)), SEED, max_versions=4, log=print
    )
    walk.run(STEPS)
    assert walk.model.versions, "the walk published nothing: choose another seed"
    downloaded = assert_every_version_downloads(
        dandi_service.url, dandi_service.token, walk, tmp_path / "dandi"
    )
    assert downloaded >= 2
