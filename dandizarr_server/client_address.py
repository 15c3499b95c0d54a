"""The one rule of which address a request comes from, for every per-address limit (the
expensive reads' and invalid tokens' throttles, django-axes' login lockouts).

``X-Forwarded-For`` is anyone's to send, so it is believed only when the deployment says a
proxy of its own stands in front (``DANDIZARR_TLS_PROXY``, the one setting that decides), and
then only its last entry: the address that proxy saw and appended (nginx's
``$proxy_add_x_forwarded_for``, Caddy's default). Entries before it are the client's own
words. Without the setting, the connection's address (``REMOTE_ADDR``) is the client's.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest) -> str:
    """The address the per-address limits count ``request`` under."""
    remote = str(request.META.get("REMOTE_ADDR") or "")
    if not settings.DANDIZARR_TLS_PROXY:
        return remote
    forwarded = str(request.META.get("HTTP_X_FORWARDED_FOR") or "")
    last = forwarded.rsplit(",", 1)[-1].strip()
    try:
        return str(ipaddress.ip_address(last))
    except ValueError:  # no header, or not an address: the proxy did not set it
        return remote
