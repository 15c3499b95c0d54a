"""The dandizarr client: a Python API over the service's REST API (docs/api.md).

``ArchiveStore`` (a zarr-python store over an archive) needs the ``zarr`` extra; it is imported
on first use, so the rest of the client works without zarr.
"""

from typing import TYPE_CHECKING, Any

from dandizarr.client.api import ApiClient
from dandizarr.client.errors import (
    ApiError,
    ArchiveNotSharded,
    AuthenticationError,
    BatchConflict,
    ChecksumMismatch,
    ClientError,
    Conflict,
    NotFound,
    OpenBatchLeft,
    PermissionDenied,
    TokenRequired,
    TransientError,
)
from dandizarr.client.facade import DandizarrClient
from dandizarr.client.models import Archive, DirectoryEntry, RemoteFile, ServiceInfo
from dandizarr.client.progress import NullProgress, Progress, TqdmProgress
from dandizarr.client.results import DownloadResult, UploadResult
from dandizarr.client.retry import RetryPolicy

if TYPE_CHECKING:
    from dandizarr.client.store import ArchiveStore


def __getattr__(name: str) -> Any:
    if name == "ArchiveStore":  # zarr is optional: import it only when asked for
        from dandizarr.client.store import ArchiveStore

        return ArchiveStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ApiClient",
    "ApiError",
    "Archive",
    "ArchiveNotSharded",
    "ArchiveStore",
    "AuthenticationError",
    "BatchConflict",
    "ChecksumMismatch",
    "ClientError",
    "Conflict",
    "DandizarrClient",
    "DirectoryEntry",
    "DownloadResult",
    "NotFound",
    "NullProgress",
    "OpenBatchLeft",
    "PermissionDenied",
    "Progress",
    "RemoteFile",
    "RetryPolicy",
    "ServiceInfo",
    "TokenRequired",
    "TqdmProgress",
    "TransientError",
    "UploadResult",
]
