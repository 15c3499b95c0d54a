"""The zarr archive service: models, request parsing, services, selectors, views and tasks."""
