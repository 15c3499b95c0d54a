"""The WSGI entry point: ``application`` for a WSGI server, with dandizarr's settings."""

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from dandizarr_server.embedded import require_shared_secret_key
from dandizarr_server.httpserver import prepare_web_worker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dandizarr_server.settings")

# Before serving anything: a web service with a key of its own would sign URLs no other
# process verifies (and vice versa).
require_shared_secret_key(settings.SECRET_KEY_SOURCE, "the web service (dandizarr_server.wsgi)")
application = get_wsgi_application()
# Each worker gets ready before it serves, not while its first requests wait.
prepare_web_worker()
