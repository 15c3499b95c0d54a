"""``DandizarrClient``: the library's entry point. The REST API calls of ``ApiClient`` plus
``upload`` and ``download``, which build on them (``Uploader``, ``Downloader``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dandizarr.client.api import ApiClient
from dandizarr.client.download import Downloader
from dandizarr.client.path_selection import PathSelection
from dandizarr.client.progress import NullProgress, Progress
from dandizarr.client.ranged_gets import RangedDownloads
from dandizarr.client.results import DownloadResult, UploadResult
from dandizarr.client.upload_types import UploadOptions


class DandizarrClient(ApiClient):
    """A client of one dandizarr service.

    ``server`` is the service's base URL; ``token`` is needed for writes. ``jobs`` is the
    number of parallel transfers (and the size of the connection pools).
    """

    def upload(
        self,
        root: str | Path,
        options: UploadOptions | None = None,
        *,
        progress: Progress | None = None,
        **fields: Any,
    ) -> UploadResult:
        """Upload the directory ``root`` into an archive and verify the server's checksum.

        ``options`` (``UploadOptions``, whose fields and defaults are documented there), with
        any of its fields given by name on top: ``client.upload(root, dandiset="000001",
        pack=True)``. The archive is ``zarr_id``, or the one called ``name`` (default: the
        directory's name) in ``dandiset``, created when absent. Returns the result;
        ``result.ok`` says whether the server's checksum equals the expected one. Raises
        ClientError for anything that stopped the upload, TypeError for a field
        ``UploadOptions`` does not have.
        """
        options = dataclasses.replace(options or UploadOptions(), **fields)
        # Uploads bring numpy and the shard builders (``--pack``); a download, ``ls`` or
        # ``checksum`` starts without them.
        from dandizarr.client.upload import Uploader

        return Uploader(self, Path(root), options, progress or NullProgress()).run()

    def upload_remote(
        self,
        url: str,
        options: UploadOptions | None = None,
        *,
        storage_options: dict[str, Any] | None = None,
        piece_bytes: int | None = None,
        progress: Progress | None = None,
        **fields: Any,
    ) -> UploadResult:
        """Upload the Zarr at ``url`` (``s3://``, ``https://``, any fsspec URL, opened with
        ``storage_options``) into an archive through one write session, with no local copy,
        and verify the server's checksum (docs/writing.md, "Uploading from a remote store").
        ``options`` and ``fields`` as for ``upload`` (``pack`` excepted); the default name is
        the URL's last directory. ``piece_bytes``: the most read from the source at a time.
        """
        options = dataclasses.replace(options or UploadOptions(), **fields)
        from dandizarr.client.remote_source import PIECE_BYTES, RemoteTree
        from dandizarr.client.remote_upload import RemoteUploader

        tree = RemoteTree(url, storage_options, piece_bytes=piece_bytes or PIECE_BYTES)
        return RemoteUploader(self, tree, options, progress or NullProgress()).run()

    def download(
        self,
        zarr_id: str,
        dest: str | Path,
        *,
        prefix: str = "",
        progress: Progress | None = None,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        ranged: RangedDownloads | None = None,
    ) -> DownloadResult:
        """Download the archive (or the directory ``prefix`` of it) into ``dest`` and verify
        its checksum; with ``include``/``exclude`` patterns only the files they select, each
        verified against the server's md5 (``path_selection``). Files over ``ranged``'s
        threshold come in byte ranges at once (``ranged_gets``; default ``RangedDownloads()``)."""
        selection = PathSelection(tuple(include), tuple(exclude))
        return Downloader(
            self, zarr_id, Path(dest), prefix, progress or NullProgress(), selection, ranged
        ).run()
