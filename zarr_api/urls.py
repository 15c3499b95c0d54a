from django.urls import include, path

from zarr_api import views

zarr = "api/zarr/<str:zarr_id>/"
draft_assets = "api/dandisets/<str:identifier>/versions/<str:version>/assets/"

urlpatterns = [
    path("api/info/", views.InfoView.as_view(), name="info"),
    path("api/dandisets/", views.DandisetListCreateView.as_view(), name="dandiset-list"),
    path("api/dandisets/<str:identifier>/", views.DandisetDetailView.as_view(), name="dandiset"),
    path(
        "api/dandisets/<str:identifier>/versions/",
        views.VersionListView.as_view(),
        name="version-list",
    ),
    path(
        "api/dandisets/<str:identifier>/versions/draft/publish/",
        views.PublishView.as_view(),
        name="publish",
    ),
    path(draft_assets, views.AssetListCreateView.as_view(), name="asset-list"),
    path(draft_assets + "<str:asset_id>/", views.AssetDetailView.as_view(), name="asset"),
    path("api/zarr/", views.ArchiveListCreateView.as_view(), name="zarr-list"),
    path(zarr, views.ArchiveDetailView.as_view(), name="zarr"),
    path(zarr + "upload/", views.UploadView.as_view(), name="zarr-upload"),
    path(zarr + "upload/complete/", views.UploadCompleteView.as_view(), name="zarr-complete"),
    path(zarr + "pack/", views.PackView.as_view(), name="zarr-pack"),
    path(zarr + "batches/<str:batch_id>/", views.BatchDetailView.as_view(), name="zarr-batch"),
    path(zarr + "files/", views.FilesView.as_view(), name="zarr-files"),
    # The unambiguous form of browsing, and the spec's form (upload/ and files/ win there).
    path(zarr + "files/<path:path>", views.FilesView.as_view(), name="zarr-file"),
    path(zarr + "<path:path>", views.FilesView.as_view(), name="zarr-path"),
    path("storage/", include("zarr_api.local_storage_urls")),
]
