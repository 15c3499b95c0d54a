"""The embedded HTTP server of ``dandizarr serve``: Django's, with replies sent at once.

Django's development server (like ``wsgiref``) writes a reply's headers and its body in separate
``send`` calls. With Nagle's algorithm on, the body then waits for the client to acknowledge
the headers, and clients delay that acknowledgement by up to 40 ms: every API call took ~45 ms
instead of ~2 ms. Setting TCP_NODELAY on each accepted connection sends both at once.
"""

from __future__ import annotations

import socket
from typing import Any

from django.contrib.staticfiles.management.commands.runserver import Command as RunServer
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIServer


class NoDelayMixin:
    """Sets TCP_NODELAY on every connection the server accepts."""

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()  # type: ignore[misc]
        if connection.family in (socket.AF_INET, socket.AF_INET6):
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection, address


class NoDelayWSGIServer(NoDelayMixin, WSGIServer):
    pass


class NoDelayThreadedWSGIServer(NoDelayMixin, ThreadedWSGIServer):
    """For Django's LiveServerThread (the tests' live service)."""


class EmbeddedServerCommand(RunServer):
    """``runserver`` with TCP_NODELAY (runserver starts it in threading mode)."""

    server_cls = NoDelayWSGIServer
