"""Building and uploading sharded archives through the API, and reading their files back."""

from __future__ import annotations

import io
import json
from typing import Any

import requests

from dandizarr.sharding.archive_packing import ShardLayout, build_shard, find_grids, plan_shards
from tests.support.api import Actor, create_archive, put, upload

ZARRAY = json.dumps(
    {
        "zarr_format": 2,
        "shape": [40, 40],
        "chunks": [4, 4],
        "dtype": "|u1",
        "compressor": None,
        "fill_value": 0,
        "filters": None,
        "order": "C",
    }
).encode()


def array_files() -> dict[str, bytes]:
    """A zarr v2 array of 10 x 10 chunks of 16 bytes, plus group metadata."""
    files = {".zgroup": b'{"zarr_format": 2}', "arr/.zarray": ZARRAY, "arr/.zattrs": b"{}"}
    for i in range(10):
        for j in range(10):
            files[f"arr/{i}.{j}"] = bytes((i * 10 + j + k) % 256 for k in range(16))
    return files


def build_shards(
    files: dict[str, bytes], cps: tuple[int, int] = (5, 5)
) -> tuple[list[dict[str, Any]], dict[str, bytes], list[str]]:
    """Pack the array's chunks: (shard declarations, shard bodies by name, loose paths)."""
    grids = find_grids({"arr/.zarray": ZARRAY})
    plans, loose = plan_shards([ShardLayout(g, cps) for g in grids], files)
    declarations, bodies = [], {}
    for plan in plans:
        sink = io.BytesIO()
        built = build_shard(cps, ((m.path, m.slot, files[m.path]) for m in plan.members), sink)
        bodies[plan.name] = sink.getvalue()
        declarations.append(
            {
                "name": plan.name,
                "etag": built.md5,
                "size": built.size,
                "chunks_per_shard": list(cps),
                "members": [
                    {
                        "path": r.path,
                        "md5": r.md5,
                        "size": r.length,
                        "offset": r.offset,
                        "slot": r.slot,
                    }
                    for r in built.members
                ],
            }
        )
    return declarations, bodies, loose


def pack_upload(
    actor: Actor,
    zarr_id: str,
    declarations: list[dict[str, Any]],
    bodies: dict[str, bytes],
    *,
    complete: bool = True,
) -> Any:
    response = actor.client.post(
        f"/api/zarr/{zarr_id}/upload/", {"shards": declarations}, format="json"
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert [s["name"] for s in body["shards"]] == [d["name"] for d in declarations]
    for target in body["shards"]:
        assert put(target["upload_url"], bodies[target["name"]]).status_code == 200
    if not complete:
        return body
    return actor.client.post(f"/api/zarr/{zarr_id}/upload/complete/")


def upload_sharded(
    actor: Actor, dandiset: str, files: dict[str, bytes], name: str = "s.zarr"
) -> str:
    zarr_id = create_archive(actor, dandiset, name)
    declarations, bodies, loose = build_shards(files)
    assert upload(actor.client, zarr_id, {p: files[p] for p in loose}).status_code == 200
    complete = pack_upload(actor, zarr_id, declarations, bodies)
    assert complete.status_code == 200, complete.content
    batch = actor.client.get(f"/api/zarr/{zarr_id}/batches/{complete.json()['batch']}/").json()
    assert batch["state"] == "applied", batch
    return zarr_id


def read_file(actor: Actor, zarr_id: str, path: str) -> bytes:
    entry = actor.client.get(f"/api/zarr/{zarr_id}/files/{path}").json()
    headers = {}
    if entry["shard"]:
        start = entry["shard"]["offset"]
        headers["Range"] = f"bytes={start}-{start + entry['shard']['length'] - 1}"
    response = requests.get(entry["download_url"], headers=headers, timeout=30)
    assert response.status_code in (200, 206), response.content
    return response.content


def listing(actor: Actor, zarr_id: str) -> list[tuple[str, int, str]]:
    response = actor.client.get(f"/api/zarr/{zarr_id}/files/", {"recursive": "true"})
    assert response.status_code == 200, response.content
    return [(f["path"], f["size"], f["digest"]) for f in response.json()["results"]]
