from django.urls import path

from zarr_api import views

urlpatterns = [
    path("api/info/", views.InfoView.as_view(), name="info"),
]
