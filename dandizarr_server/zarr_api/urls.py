"""The API's routes, and the local storage backend's (``/storage/``)."""

from django.urls import include, path

from dandizarr_server.zarr_api.routes import dandi as dandi_urls
from dandizarr_server.zarr_api.views import (
    archives,
    dandisets,
    files,
    read_links,
    session_uploads,
    sessions,
    versions,
)

zarr = "api/zarr/<str:zarr_id>/"
draft_assets = "api/dandisets/<str:identifier>/versions/<str:version>/assets/"

urlpatterns = [
    *dandi_urls.urlpatterns,
    path("api/info/", dandisets.InfoView.as_view(), name="info"),
    path("api/dandisets/", dandisets.DandisetListCreateView.as_view(), name="dandiset-list"),
    path(
        "api/dandisets/<str:identifier>/", dandisets.DandisetDetailView.as_view(), name="dandiset"
    ),
    path(
        "api/dandisets/<str:identifier>/versions/",
        dandisets.VersionListView.as_view(),
        name="version-list",
    ),
    path(
        "api/dandisets/<str:identifier>/unembargo/",
        dandisets.UnembargoView.as_view(),
        name="unembargo",
    ),
    path(
        "api/dandisets/<str:identifier>/versions/draft/publish/",
        dandisets.PublishView.as_view(),
        name="publish",
    ),
    path(draft_assets, dandisets.AssetListCreateView.as_view(), name="asset-list"),
    path(draft_assets + "<str:asset_id>/", dandisets.AssetDetailView.as_view(), name="asset"),
    path("api/zarr/", archives.ArchiveListCreateView.as_view(), name="zarr-list"),
    path(zarr, archives.ArchiveDetailView.as_view(), name="zarr"),
    path(zarr + "upload/", archives.UploadView.as_view(), name="zarr-upload"),
    path(zarr + "upload/add/", archives.UploadAddView.as_view(), name="zarr-upload-add"),
    path(zarr + "upload/complete/", archives.UploadCompleteView.as_view(), name="zarr-complete"),
    path(zarr + "pack/", archives.PackView.as_view(), name="zarr-pack"),
    path(zarr + "batches/<str:batch_id>/", archives.BatchDetailView.as_view(), name="zarr-batch"),
    path(
        zarr + "batches/<str:batch_id>/parts/",
        archives.BatchPartsView.as_view(),
        name="zarr-batch-parts",
    ),
    path(zarr + "read-links/", read_links.ReadLinksView.as_view(), name="zarr-read-links"),
    path(
        zarr + "read-links/<str:link_id>/",
        read_links.ReadLinkView.as_view(),
        name="zarr-read-link",
    ),
    path(zarr + "versions/", versions.ArchiveVersionsView.as_view(), name="zarr-versions"),
    path(
        zarr + "versions/<str:number>/", versions.ArchiveVersionView.as_view(), name="zarr-version"
    ),
    path(
        zarr + "versions/<str:number>/changes/",
        versions.VersionChangesView.as_view(),
        name="zarr-version-changes",
    ),
    path(
        zarr + "versions/<str:number>/reset/",
        versions.DraftResetView.as_view(),
        name="zarr-version-reset",
    ),
    path(zarr + "diff/", versions.ArchiveDiffView.as_view(), name="zarr-diff"),
    path(zarr + "sessions/", sessions.SessionsView.as_view(), name="zarr-sessions"),
    path(zarr + "sessions/<str:session_id>/", sessions.SessionView.as_view(), name="zarr-session"),
    path(
        zarr + "sessions/<str:session_id>/files/",
        sessions.SessionFilesView.as_view(),
        name="zarr-session-files",
    ),
    path(
        zarr + "sessions/<str:session_id>/deletions/",
        sessions.SessionDeletionsView.as_view(),
        name="zarr-session-deletions",
    ),
    path(
        zarr + "sessions/<str:session_id>/changes/",
        sessions.SessionChangesView.as_view(),
        name="zarr-session-changes",
    ),
    path(
        zarr + "sessions/<str:session_id>/uploads/",
        session_uploads.SessionUploadsView.as_view(),
        name="zarr-session-uploads",
    ),
    path(
        zarr + "sessions/<str:session_id>/uploads/<int:upload>/parts/",
        session_uploads.SessionUploadPartsView.as_view(),
        name="zarr-session-upload-parts",
    ),
    path(
        zarr + "sessions/<str:session_id>/uploads/<int:upload>/finish/",
        session_uploads.SessionUploadFinishView.as_view(),
        name="zarr-session-upload-finish",
    ),
    path(
        zarr + "sessions/<str:session_id>/commit/",
        sessions.SessionCommitView.as_view(),
        name="zarr-session-commit",
    ),
    # The unambiguous form of browsing, and the spec's form (upload/ and files/ win there).
    path(zarr + "files/<path:path>", files.FilesView.as_view(), name="zarr-file"),
    path(zarr + "<path:path>", files.FilesView.as_view(), name="zarr-path"),
    path("storage/", include("dandizarr_server.zarr_api.routes.local_storage")),
]
