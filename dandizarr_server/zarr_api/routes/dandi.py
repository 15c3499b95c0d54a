"""Routes of the DANDI Archive API that the real ``dandi`` CLI uses (docs/api.md, "DANDI
clients"), listed before ours: on ``files`` and ``files/`` the DANDI shape wins, and our
browsing is at ``tree/{path}`` (``files/{path}`` still answers for any other path)."""

from django.urls import path, re_path

from dandizarr_server.zarr_api.views import dandi_compat, files

zarr = r"^api/zarr/(?P<zarr_id>[^/]+)/"
version = "api/dandisets/<str:identifier>/versions/<str:version>/"

urlpatterns = [
    path("server-info", dandi_compat.ServerInfoView.as_view(), name="server-info"),
    re_path(r"^api/auth/token/?$", dandi_compat.AuthTokenView.as_view(), name="auth-token"),
    path(version, dandi_compat.VersionMetadataView.as_view(), name="version"),
    path(version + "info/", dandi_compat.VersionInfoView.as_view(), name="version-info"),
    path(
        version + "assets/<str:asset_id>/info/",
        dandi_compat.AssetInfoView.as_view(),
        name="asset-info",
    ),
    re_path(zarr + r"files/?$", dandi_compat.DandiFilesView.as_view(), name="zarr-files"),
    re_path(zarr + r"finalize/?$", dandi_compat.FinalizeView.as_view(), name="zarr-finalize"),
    re_path(zarr + r"ingest/?$", dandi_compat.FinalizeView.as_view(), name="zarr-ingest"),
    re_path(zarr + r"tree/?$", files.FilesView.as_view(), name="zarr-tree-root"),
    path("api/zarr/<str:zarr_id>/tree/<path:path>", files.FilesView.as_view(), name="zarr-tree"),
]
