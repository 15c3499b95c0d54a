"""The object-store contract: what every ``ObjectStore`` backend must do, as one test class.

In the manner of zarr-python's ``zarr.testing.store.StoreTests``: a backend's test module
subclasses ``StoreContract``, overrides the ``store`` fixture (a fresh, empty store per test) and
sets the flags its backend needs; pytest then runs every contract test against it. What not
every backend has is a class of its own to mix in (``MultipartContract``,
``PresignedURLContract``), so no test is collected only to skip.
The service relies on each behaviour here (key order, ranges and their errors, missing keys,
ETags, versions, multipart uploads), so a backend that passes can stand in for another.

Needs pytest (and ``requests`` for URL tests), nothing of the server or Django: the in-memory and
local backends run the contract without a database. Presigned URLs need an HTTP server to answer
them; ``PresignedURLContract`` holds those tests apart, for stores that serve their URLs.
"""

from dandizarr.testing.store_contract.listing import ListingContract
from dandizarr.testing.store_contract.multipart import MultipartContract
from dandizarr.testing.store_contract.objects import ObjectsContract
from dandizarr.testing.store_contract.presigned import PresignedURLContract
from dandizarr.testing.store_contract.support import LISTED_KEYS, ContractBase, md5
from dandizarr.testing.store_contract.versions import VersionsContract

__all__ = [
    "LISTED_KEYS",
    "ContractBase",
    "ListingContract",
    "MultipartContract",
    "ObjectsContract",
    "PresignedURLContract",
    "StoreContract",
    "VersionsContract",
    "md5",
]


class StoreContract(ObjectsContract, ListingContract, VersionsContract):
    """What every store keeps: subclass, override ``store``, set the flags."""
