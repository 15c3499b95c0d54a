from django.urls import path

from dandizarr_server.zarr_api.pages import client, neuroglancer, views

archive = "archives/<str:zarr_id>/"

urlpatterns = [
    path("", views.home, name="page-home"),
    path(archive, views.archive, name="page-archive"),
    path(archive + "tree/", views.tree, name="page-tree-root"),
    path(archive + "tree/<path:path>", views.tree, name="page-tree"),
    path(archive + "preview.png", views.preview_png, name="page-preview"),
    # The archive's OME-Zarr description (a JSON endpoint; wins over an archive path "ome/" in
    # the spec's browsing form, which the files/ form still reaches).
    path("api/zarr/<str:zarr_id>/ome/", views.ome_summary, name="zarr-ome"),
    # The client matching this server, for `pip install` (the home page gives the command).
    path("client/<str:filename>", client.client_wheel_download, name="client-wheel"),
    path("neuroglancer/", neuroglancer.viewer_root, name="neuroglancer"),
    path("neuroglancer/v/<slug:token>/", neuroglancer.viewer_page, name="neuroglancer-viewer"),
    path(
        "neuroglancer/v/<slug:token>/<str:name>",
        neuroglancer.viewer_file,
        name="neuroglancer-file",
    ),
]
