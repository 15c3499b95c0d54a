"""``ApiClient``: one method per call of the service's REST API (docs/api.md), nothing more.

Upload and download build on it (``dandizarr.client.upload``, ``dandizarr.client.download``);
``DandizarrClient`` (``dandizarr.client.facade``) adds them as methods.

The calls are grouped by what they act on, each group in a module of its own: dandisets and
archives (``api_archives``), an archive's tree (``api_browsing``), upload batches and deletions
(``api_batches``), write sessions (``api_sessions``). All are built on ``ApiConnection``
(``api_connection``): sessions, retries, errors, the service's description.
"""

from __future__ import annotations

from dandizarr.client.api_archives import ArchiveCalls
from dandizarr.client.api_batches import BatchCalls
from dandizarr.client.api_browsing import BrowsingCalls
from dandizarr.client.api_sessions import SessionCalls


class ApiClient(ArchiveCalls, BrowsingCalls, BatchCalls, SessionCalls):
    """A client of one dandizarr service's REST API.

    ``server`` is the service's base URL; ``token`` is needed for writes. ``jobs`` is the
    number of parallel transfers (and the size of the connection pools).
    """
