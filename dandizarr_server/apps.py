"""The project as a Django app: makes its Celery app the current one in every process."""

from django.apps import AppConfig

# Importing it sets it as Celery's default app, so tasks scheduled by name go through it.
from dandizarr_server.celery import app as celery_app


class DandizarrConfig(AppConfig):
    name = "dandizarr_server"
    verbose_name = "dandizarr project"
    celery_app = celery_app
