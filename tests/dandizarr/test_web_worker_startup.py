"""How a web worker starts: every web worker is prepared before it serves (its malloc settings
are tests/dandizarr/test_allocator.py's)."""

from __future__ import annotations

import gc
import sys

from django.urls import clear_url_caches

from dandizarr_server import httpserver


def test_a_web_worker_is_prepared_before_it_serves() -> None:
    """The URLconf is imported and what exists by then frozen (the store's warm-up is
    tests/objectstore's)."""
    clear_url_caches()
    sys.modules.pop("dandizarr_server.urls", None)
    gc.unfreeze()
    try:
        httpserver.prepare_web_worker()
        assert "dandizarr_server.urls" in sys.modules
        assert gc.get_freeze_count() > 1000  # the modules and models loaded by now
    finally:
        gc.unfreeze()
