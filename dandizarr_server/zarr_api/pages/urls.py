from django.urls import path

from dandizarr_server.zarr_api.pages import views

archive = "archives/<str:zarr_id>/"

urlpatterns = [
    path("", views.home, name="page-home"),
    path(archive, views.archive, name="page-archive"),
    path(archive + "tree/", views.tree, name="page-tree-root"),
    path(archive + "tree/<path:path>", views.tree, name="page-tree"),
    path(archive + "preview.png", views.preview_png, name="page-preview"),
]
