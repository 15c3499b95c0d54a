"""The archive's rules: the bucket's key layout, which paths and declarations the API
accepts, and who may read and write. No storage or HTTP calls."""
