"""dandizarr: Zarr archives in object storage with a verifiable tree hash.

Importing this package stays light (no Django, no Celery) so the client CLI starts fast;
the Celery app lives in ``dandizarr_server.celery``.
"""

__version__ = "0.1.0"
