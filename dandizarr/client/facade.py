"""``DandizarrClient``: the library's entry point. The REST API calls of ``ApiClient`` plus
``upload`` and ``download``, which build on them (``Uploader``, ``Downloader``)."""

from __future__ import annotations

from pathlib import Path

from dandizarr.client.api import ApiClient
from dandizarr.client.download import Downloader
from dandizarr.client.progress import NullProgress, Progress
from dandizarr.client.results import DownloadResult, UploadResult
from dandizarr.client.upload_types import DEFAULT_MAX_BATCH_FILES, UploadOptions


class DandizarrClient(ApiClient):
    """A client of one dandizarr service.

    ``server`` is the service's base URL; ``token`` is needed for writes. ``jobs`` is the
    number of parallel transfers (and the size of the connection pools).
    """

    def upload(
        self,
        root: str | Path,
        *,
        dandiset: str | None = None,
        name: str | None = None,
        zarr_id: str | None = None,
        sync: bool = False,
        cancel_open_batch: bool = False,
        hash_jobs: int | None = None,
        max_batch_files: int = DEFAULT_MAX_BATCH_FILES,
        checksum_timeout: float = 600.0,
        pack: bool = False,
        shard_target_bytes: int | None = None,
        progress: Progress | None = None,
    ) -> UploadResult:
        """Upload the directory ``root`` into an archive and verify the server's checksum.

        The archive is ``zarr_id``, or the one called ``name`` (default: the directory's
        name) in ``dandiset``, created when absent. Returns the result; ``result.ok`` says
        whether the server's checksum equals the expected one. Raises ClientError for
        anything that stopped the upload.

        ``pack`` stores the arrays' chunk files in shard objects (docs/sharded.md): a new
        archive is created sharded, and chunk files are sent in pack batches of shards of about
        ``shard_target_bytes`` (default 64 MiB) each.
        """
        options = UploadOptions(
            dandiset=dandiset,
            name=name,
            zarr_id=zarr_id,
            sync=sync,
            cancel_open_batch=cancel_open_batch,
            hash_jobs=hash_jobs,
            max_batch_files=max_batch_files,
            checksum_timeout=checksum_timeout,
            pack=pack,
            shard_target_bytes=shard_target_bytes,
        )
        # Uploads bring numpy and the shard builders (``--pack``); a download, ``ls`` or
        # ``checksum`` starts without them.
        from dandizarr.client.upload import Uploader

        return Uploader(self, Path(root), options, progress or NullProgress()).run()

    def download(
        self,
        zarr_id: str,
        dest: str | Path,
        *,
        prefix: str = "",
        progress: Progress | None = None,
    ) -> DownloadResult:
        """Download the archive (or the directory ``prefix`` of it) into ``dest`` and verify."""
        return Downloader(self, zarr_id, Path(dest), prefix, progress or NullProgress()).run()
