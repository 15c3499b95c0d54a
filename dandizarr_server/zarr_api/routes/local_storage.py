"""URLs of the local storage backend's presigned requests; included under ``storage/``."""

from django.urls import path

from dandizarr_server.zarr_api.views import local_storage as local_storage_views

urlpatterns = [
    path("<path:key>", local_storage_views.object_view, name="local-storage-object"),
]
