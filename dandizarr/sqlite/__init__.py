"""SQLite for ``dandizarr serve`` (``ENGINE = "dandizarr.sqlite"``): see ``base``."""
