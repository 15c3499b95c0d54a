"""A live service on either storage backend (S3 on moto's server, or the local backend serving
its own presigned URLs), a user with a token and a dandiset, and archives of three Zarr arrays
(v2, v3, v3 ``sharding_indexed``) uploaded loose, packed by the client, and converted by
``POST pack/``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.live_users import user_with_dandiset
from tests.support.readers import Live, upload_archive, write_arrays


@pytest.fixture(params=["s3", "local"])
def live(
    request: pytest.FixtureRequest,
    live_server: Any,
    transactional_db: None,
    settings: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Live]:
    from django.db import connections

    # Readers keep their connections (and so live-server threads) open past the test; threads
    # that close their database session after each request let the test database be dropped.
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)

    if request.param == "s3":
        request.getfixturevalue("s3_storage")
    else:
        settings.DANDIZARR_STORAGE = "local"
        settings.DANDIZARR_LOCAL_STORAGE_DIR = tmp_path / "storage"
        settings.PUBLIC_URL = live_server.url
    settings.DANDIZARR_SHARD_TARGET_BYTES = 3000  # several shards from POST pack/
    monkeypatch.setenv("DANDIZARR_STATE_DIR", str(tmp_path / "client-state"))
    token, dandiset = user_with_dandiset(live_server.url, "reader-tests", "reader tests")
    yield Live(live_server.url, token, dandiset, request.param)


@pytest.fixture
def packed_archive(live: Live, tmp_path: Path) -> tuple[str, dict[str, bytes]]:
    """A client-packed archive of the three arrays (metadata loose, chunks packed), and the
    local files it holds."""
    root = tmp_path / "arrays.zarr"
    write_arrays(root)
    files = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    return upload_archive(live, root, "packed"), files
