"""The root URL map: the admin, the OpenAPI schema and its docs, then the zarr_api routes."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from dandizarr_server.zarr_api.views import health

# An exception no view handled (one in a middleware, say): 503 when a backing service is down.
handler500 = "dandizarr_server.zarr_api.views.server_errors.server_error"
# No route matched, a request refused before a view: JSON with a code on the API's routes.
handler404 = "dandizarr_server.zarr_api.views.server_errors.not_found"
handler400 = "dandizarr_server.zarr_api.views.server_errors.bad_request"

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(
            url_name="schema", template_name="dandizarr/swagger_ui.html"
        ),
        name="docs",
    ),
    path("", include("dandizarr_server.zarr_api.pages.urls")),
    path("", include("dandizarr_server.zarr_api.routes.reads")),
    path("", include("dandizarr_server.zarr_api.urls")),
]
