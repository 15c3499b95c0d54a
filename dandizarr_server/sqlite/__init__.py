"""SQLite for ``dandizarr serve`` (``ENGINE = "dandizarr_server.sqlite"``): see ``base``."""
