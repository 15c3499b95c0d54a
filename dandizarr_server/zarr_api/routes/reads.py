"""Routes of ``dandizarr_server.zarr_api.views.reads``: the archive as plain HTTP under ``/zarr/``
(outside
``/api/``, mirroring the bucket's layout) and its reference manifest. Included before
``dandizarr_server.zarr_api.urls``: ``manifest/`` and ``manifest.json`` win over top-level archive
paths of
those names (browse them with the ``files/`` form)."""

from django.urls import path

from dandizarr_server.zarr_api.views import reads as views

urlpatterns = [
    path("api/zarr/<str:zarr_id>/manifest/", views.ManifestView.as_view(), name="zarr-manifest"),
    # The same, under a name fsspec's ReferenceFileSystem reads as one JSON document (a URL
    # ending in "/" it takes for a directory of Parquet references).
    path(
        "api/zarr/<str:zarr_id>/manifest.json",
        views.ManifestView.as_view(),
        name="zarr-manifest-json",
    ),
    path("zarr/<str:zarr_id>/", views.archive_key, name="zarr-read-root"),
    # A private read link (docs/embargo.md): its own prefix, outside /zarr/ and /api/.
    path("links/<str:secret>/", views.link_key, name="link-read-root"),
    path("links/<str:secret>/<path:key>", views.link_key, name="link-read"),
    path("zarr/<str:zarr_id>/<path:key>", views.archive_key, name="zarr-read"),
]
