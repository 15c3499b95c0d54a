"""The zarr_api Django app: its configuration, and its Celery tasks registered at start."""

from django.apps import AppConfig


class ZarrApiConfig(AppConfig):
    name = "zarr_api"
    verbose_name = "Zarr archives"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the tasks in every process (web, worker, commands), so scheduling by name
        # finds them, and runs them inline when Celery is eager.
        from zarr_api import tasks  # noqa: F401
