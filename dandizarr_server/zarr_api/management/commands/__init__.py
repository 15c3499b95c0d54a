"""``manage.py`` commands: bootstrap_admin, audit_zarr."""
