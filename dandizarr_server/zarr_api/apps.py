"""The zarr_api Django app: its configuration, and its Celery tasks registered at start."""

from django.apps import AppConfig
from django.db.models.signals import m2m_changed


class ZarrApiConfig(AppConfig):
    name = "dandizarr_server.zarr_api"
    # The label the migrations and tables were made under.
    label = "zarr_api"
    verbose_name = "Zarr archives"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the tasks in every process (web, worker, commands), so scheduling by name
        # finds them, and runs them inline when Celery is eager.
        from dandizarr_server.zarr_api import tasks  # noqa: F401
        from dandizarr_server.zarr_api.models import Dandiset
        from dandizarr_server.zarr_api.services.lost_writers import owners_changed

        # Owners removed from a dandiset lose their open uploads (services.lost_writers).
        m2m_changed.connect(
            owners_changed, sender=Dandiset.owners.through, dispatch_uid="owners_changed"
        )
