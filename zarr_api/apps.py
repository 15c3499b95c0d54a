from django.apps import AppConfig


class ZarrApiConfig(AppConfig):
    name = "zarr_api"
    verbose_name = "Zarr archives"
    default_auto_field = "django.db.models.BigAutoField"
