"""Management commands of the zarr archive service."""
