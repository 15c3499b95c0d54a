"""The WSGI entry point: ``application`` for a WSGI server, with dandizarr's settings."""

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from dandizarr.embedded import require_shared_secret_key
from dandizarr.httpserver import freeze_startup_objects
from zarr_api.storage import get_store

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dandizarr.settings")

# Before serving anything: a web service with a key of its own would sign URLs no other
# process verifies (and vice versa).
require_shared_secret_key(settings.SECRET_KEY_SOURCE, "the web service (dandizarr.wsgi)")
application = get_wsgi_application()
# Each worker builds its store (an S3 client loads boto3's service model and endpoint rules:
# about a second of CPU) and starts its threads before it serves, not while its first
# requests wait.
get_store().warm_up()
freeze_startup_objects()
