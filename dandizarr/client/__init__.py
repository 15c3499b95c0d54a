"""The dandizarr client: a Python API over the service's REST API (docs/api.md)."""

from dandizarr.client.api import DandizarrClient
from dandizarr.client.download import DownloadResult
from dandizarr.client.errors import (
    ApiError,
    AuthenticationError,
    BatchConflict,
    ChecksumMismatch,
    ClientError,
    NotFound,
    PermissionDenied,
    TransientError,
)
from dandizarr.client.models import Archive, DirectoryEntry, RemoteFile, ServiceInfo
from dandizarr.client.progress import NullProgress, Progress, TqdmProgress
from dandizarr.client.retry import RetryPolicy
from dandizarr.client.upload import UploadResult

__all__ = [
    "ApiError",
    "Archive",
    "AuthenticationError",
    "BatchConflict",
    "ChecksumMismatch",
    "ClientError",
    "DandizarrClient",
    "DirectoryEntry",
    "DownloadResult",
    "NotFound",
    "NullProgress",
    "PermissionDenied",
    "Progress",
    "RemoteFile",
    "RetryPolicy",
    "ServiceInfo",
    "TqdmProgress",
    "TransientError",
    "UploadResult",
]
