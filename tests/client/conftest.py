"""A live service for the client: Django's test server in a thread (test PostgreSQL database),
S3 on moto's server (or SeaweedFS), Celery tasks inline; a user with a token and a dandiset
of theirs. A test marked ``@pytest.mark.s3_servers("moto", "seaweedfs")`` runs once per S3
server named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dandizarr.client import DandizarrClient
from dandizarr.client.progress import NullProgress
from dandizarr.client.store import ArchiveStore
from dandizarr.client.upload import Uploader
from dandizarr.client.upload_types import UploadOptions
from tests.support import seaweedfs as seaweedfs_keys
from tests.support.flaky_storage import FlakyStorage
from tests.support.live_client import Service, make_tree
from tests.support.live_users import user_with_dandiset
from tests.support.sharded_client import MakeUploader

S3_SERVERS = ("moto", "seaweedfs")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``@pytest.mark.s3_servers(*names)``: the test once per S3 server named."""
    marker = metafunc.definition.get_closest_marker("s3_servers")
    if marker is None:
        return
    unknown = set(marker.args) - set(S3_SERVERS)
    if not marker.args or unknown:
        raise pytest.UsageError(f"s3_servers takes some of {S3_SERVERS}, not {marker.args}")
    metafunc.parametrize("s3_server", marker.args)


@pytest.fixture
def s3_server() -> str:
    """The S3 server ``service`` runs on: moto, unless the ``s3_servers`` marker says others."""
    return "moto"


@pytest.fixture
def service(
    request: pytest.FixtureRequest,
    s3_server: str,
    live_server: Any,
    transactional_db: None,
    settings: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Service]:
    """The service with S3 on ``s3_server``: moto, or SeaweedFS."""
    if s3_server == "seaweedfs":
        endpoint = request.getfixturevalue("seaweedfs").endpoint_url
        bucket = request.getfixturevalue("seaweedfs_bucket")
        access_key, secret_key = seaweedfs_keys.ACCESS_KEY, seaweedfs_keys.SECRET_KEY
    else:
        endpoint = request.getfixturevalue("moto_server")
        bucket = request.getfixturevalue("s3_bucket")
        access_key = secret_key = "testing"
    settings.DANDIZARR_STORAGE = "s3"
    settings.DANDIZARR_S3_ENDPOINT_URL = endpoint
    settings.DANDIZARR_S3_PRESIGN_ENDPOINT_URL = None
    settings.DANDIZARR_S3_BUCKET = bucket
    settings.DANDIZARR_S3_ACCESS_KEY_ID = access_key
    settings.DANDIZARR_S3_SECRET_ACCESS_KEY = secret_key
    settings.DANDIZARR_BATCH_LIMIT = 7  # several batches even for small trees,
    settings.DANDIZARR_OPEN_BATCH_FILE_LIMIT = 14  # each a start and an add (POST upload/add/)
    state_dir = tmp_path / "client-state"
    monkeypatch.setenv("DANDIZARR_STATE_DIR", str(state_dir))
    token, dandiset = user_with_dandiset(live_server.url, "uploader", "client tests")
    yield Service(
        url=live_server.url,
        token=token,
        dandiset=dandiset,
        bucket=bucket,
        moto=endpoint,
        state_dir=state_dir,
        access_key=access_key,
        secret_key=secret_key,
    )


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "sample.zarr"
    return root, make_tree(root, 40)


@pytest.fixture
def uploader(service: Service) -> Iterator[MakeUploader]:
    """``uploader(root, jobs=8, **options)``: an Uploader into the test dandiset (``jobs``: its
    client's threads, which build shards too); its client is closed when the test ends (a
    pooled connection keeps a live-server thread and its database session)."""
    clients: list[DandizarrClient] = []

    def make(root: Path, jobs: int = 8, **options: Any) -> Uploader:
        clients.append(service.client(jobs=jobs))
        options = {"dandiset": service.dandiset, **options}
        return Uploader(clients[-1], root, UploadOptions(**options), NullProgress())

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def stores() -> Iterator[list[ArchiveStore]]:
    """Stores closed when the test ends (a pooled connection keeps a live-server thread)."""
    opened: list[ArchiveStore] = []
    yield opened
    for store in opened:
        store.close()


@pytest.fixture
def archive(service: Service) -> str:
    """A new loose archive in the test dandiset (for the stores that write into it)."""
    response = service.api(
        "POST", "/api/zarr/", json={"name": "written.zarr", "dandiset": service.dandiset}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["zarr_id"])


@pytest.fixture
def opened(service: Service, archive: str) -> Iterator[Any]:
    """``opened(**kwargs)``: an ``ArchiveStore`` on ``archive`` (the service's token unless
    given), closed when the test ends."""
    made: list[ArchiveStore] = []

    def make(**kwargs: Any) -> ArchiveStore:
        kwargs.setdefault("token", service.token)
        made.append(ArchiveStore(service.url, archive, **kwargs))
        return made[-1]

    yield make
    for store in made:
        store.close()


@pytest.fixture
def flaky(service: Service, settings: Any) -> Iterator[FlakyStorage]:
    """A proxy in front of ``service``'s S3 server that fails requests on cue; the service signs
    its URLs for it."""
    proxy = FlakyStorage(service.moto)
    settings.DANDIZARR_S3_PRESIGN_ENDPOINT_URL = proxy.url
    yield proxy
    proxy.close()
