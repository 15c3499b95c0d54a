"""The Celery application. Tasks are declared with ``@app.task`` in ``zarr_api.tasks``."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dandizarr.settings")

app = Celery("dandizarr")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["zarr_api"])
app.set_default()
