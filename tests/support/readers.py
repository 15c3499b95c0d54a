"""Archives for the reader tests (tensorstore, zarr-python over HTTP and the manifest): the
live service handle, arrays written in each format, uploads of them loose, packed and
converted, and the three readers."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import requests
import tensorstore as ts
import zarr
from zarr.storage import FsspecStore, LocalStore

from dandizarr.client import DandizarrClient, RetryPolicy

SHAPE = (45, 37)
# Only this region is written: chunks (and whole shards) outside it never exist.
WRITTEN = (slice(0, 21), slice(3, 26))
ARRAYS = ("v2", "v3", "v3s")
KINDS = ("loose", "packed", "converted")


@dataclass
class Live:
    url: str
    token: str
    dandiset: str
    backend: str

    def client(self) -> DandizarrClient:
        return DandizarrClient(self.url, self.token, retry=RetryPolicy(attempts=4, backoff=0.05))

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Token {self.token}", **kwargs.pop("headers", {})}
        return requests.request(method, self.url + path, headers=headers, timeout=60, **kwargs)


def write_arrays(root: Path) -> dict[str, np.ndarray]:
    """The three arrays, partly written; returns what each reads as (fill values included)."""
    data = (np.arange(np.prod(SHAPE), dtype="int32").reshape(SHAPE) * 7) - 500
    store = LocalStore(root)
    made = {
        "v2": zarr.create_array(
            store,
            name="v2",
            shape=SHAPE,
            chunks=(8, 8),
            dtype="int32",
            zarr_format=2,
            fill_value=-1,
        ),
        "v3": zarr.create_array(
            store, name="v3", shape=SHAPE, chunks=(8, 8), dtype="int32", fill_value=-2
        ),
        "v3s": zarr.create_array(
            store,
            name="v3s",
            shape=SHAPE,
            chunks=(4, 4),
            shards=(16, 8),
            dtype="int32",
            fill_value=-3,
        ),
    }
    expected = {}
    for name, array in made.items():
        array[WRITTEN] = data[WRITTEN]
        expected[name] = array[...]
    return expected


def upload_archive(live: Live, root: Path, kind: str) -> str:
    """``root`` as an archive of ``kind``; returns its zarr_id once its checksum is complete."""
    with live.client() as client:
        if kind == "packed":
            report = client.upload(
                root, dandiset=live.dandiset, name=kind, pack=True, shard_target_bytes=2000
            )
        else:
            report = client.upload(root, dandiset=live.dandiset, name=kind)
        assert report.ok, report.to_json()
        zarr_id = str(report.zarr_id)
        if kind == "converted":
            assert live.api("POST", f"/api/zarr/{zarr_id}/pack/").status_code == 202
            deadline = time.monotonic() + 120
            while (archive := live.api("GET", f"/api/zarr/{zarr_id}/").json())["packing"]:
                assert time.monotonic() < deadline, "POST pack/ did not finish"
                time.sleep(0.1)
            assert archive["shard_count"] > 1, archive
        client.wait_for_checksum(zarr_id)
        return zarr_id


# The three standard readers, each returning an array whole and its PARTIAL region.
PARTIAL = (slice(5, 30), slice(2, 11))


def read_tensorstore(base_url: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    spec = {
        "driver": "zarr" if name == "v2" else "zarr3",
        "kvstore": {"driver": "http", "base_url": base_url},
    }
    array = ts.open(spec, read=True).result()
    return array.read().result(), array[PARTIAL].read().result()


def read_zarr_http(url: str) -> tuple[np.ndarray, np.ndarray]:
    array = zarr.open_array(url, mode="r")
    return array[...], array[PARTIAL]


def read_zarr_manifest(manifest_url: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    fs = fsspec.filesystem(
        "reference",
        fo=manifest_url,
        remote_protocol="http",
        remote_options={"asynchronous": True},
        asynchronous=True,
    )
    array = zarr.open_array(FsspecStore(fs, read_only=True, path=name), mode="r")
    return array[...], array[PARTIAL]
