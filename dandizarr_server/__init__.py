"""dandizarr's service: the Django project and its app (``pip install 'dandizarr[server]'``).

Imports the libraries of ``dandizarr`` (checksums, objectstore, sharding); nothing in
``dandizarr`` imports this package.
"""
