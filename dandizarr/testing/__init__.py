"""What a backend's tests need to check it keeps dandizarr's contracts (``store_contract``).

Pure library, importing pytest: only tests import it (as zarr-python's ``zarr.testing``).
"""
