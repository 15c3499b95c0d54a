"""The URL tables the project's URLconf includes (``dandizarr_server/urls.py``)."""
