"""Random sequences of batches, cancels and deletes; the tree must always equal storage."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from dandizarr.sharding.archive_packing import build_shard
from dandizarr_server.zarr_api.models import ShardMember
from tests.support.api import Actor, md5, put, storage_listing
from tests.support.hypothesis_profiles import examples
from tests.support.tree_check import assert_tree_matches_storage

# No path is a directory prefix of another, so every batch is valid as far as paths go.
PATHS = [f"{a}/{b}/{f}" for a in "ab" for b in "cd" for f in "xyz"] + ["t1", "t\u00e91"]
CONTENTS = [b"", b"one", b"two", b"three" * 100]


def test_random_batches_keep_tree_equal_to_storage(
    owner: Actor, dandiset: str, s3_storage: str
) -> None:
    counter = [0]

    class ArchiveMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            counter[0] += 1
            response = owner.client.post(
                "/api/zarr/", {"name": f"m{counter[0]}", "dandiset": dandiset}, format="json"
            )
            self.zarr_id = response.json()["zarr_id"]
            self.model: dict[str, bytes] = {}

        @rule(
            batch=st.dictionaries(
                st.sampled_from(PATHS), st.sampled_from(CONTENTS), min_size=1, max_size=6
            ),
            fate=st.dictionaries(
                st.sampled_from(PATHS), st.sampled_from(["missing", "wrong"]), max_size=2
            ),
            on_failure=st.sampled_from(["fix", "cancel"]),
        )
        def upload_batch(
            self, batch: dict[str, bytes], fate: dict[str, str], on_failure: str
        ) -> None:
            fate = {p: f for p, f in fate.items() if p in batch}
            client = owner.client
            response = client.post(
                f"/api/zarr/{self.zarr_id}/upload/",
                [{"path": p, "etag": md5(b)} for p, b in batch.items()],
                format="json",
            )
            assert response.status_code == 200, response.content
            urls = {t["path"]: t["upload_url"] for t in response.json()}
            # What storage holds for each path of the batch once the client is done PUTting.
            held: dict[str, bytes | None] = {}
            for path, body in batch.items():
                if fate.get(path) == "missing":
                    held[path] = self.model.get(path)
                    continue
                held[path] = body + b"!" if fate.get(path) == "wrong" else body
                put(urls[path], held[path])
            missing = sorted(p for p, h in held.items() if h is None)
            mismatched = sorted(p for p, h in held.items() if h is not None and h != batch[p])
            response = client.post(f"/api/zarr/{self.zarr_id}/upload/complete/")
            if not missing and not mismatched:
                assert response.status_code == 200, response.content
                self.model.update(batch)
                return
            assert response.status_code == 400, response.content
            body = response.json()
            assert sorted(body["missing"]) == missing
            assert sorted(m["path"] for m in body["mismatched"]) == mismatched
            if on_failure == "fix":
                for path in missing + mismatched:
                    put(urls[path], batch[path])
                assert client.post(f"/api/zarr/{self.zarr_id}/upload/complete/").status_code == 200
                self.model.update(batch)
            else:
                assert client.delete(f"/api/zarr/{self.zarr_id}/upload/").status_code == 204
                for path, content in held.items():
                    if content is not None and self.model.get(path) != content:
                        # The batch replaced it: the cancel deletes it, old content and all.
                        self.model.pop(path, None)

        @rule(data=st.data(), with_absent=st.booleans())
        def delete_files(self, data: Any, with_absent: bool) -> None:
            if not self.model:
                return
            paths = data.draw(
                st.lists(st.sampled_from(sorted(self.model)), min_size=1, unique=True)
            )
            absent = [p for p in PATHS if p not in self.model][:1] if with_absent else []
            response = owner.client.delete(
                f"/api/zarr/{self.zarr_id}/files/",
                [{"path": p} for p in paths + absent],
                format="json",
            )
            if absent:
                assert response.status_code == 404 and response.json()["missing"] == absent
                return
            assert response.status_code == 204, response.content
            for path in paths:
                del self.model[path]

        @invariant()
        def tree_equals_storage(self) -> None:
            listing = storage_listing(self.zarr_id)
            assert {p: e for p, (_, e) in listing.items()} == {
                p: md5(b) for p, b in self.model.items()
            }
            assert_tree_matches_storage(self.zarr_id)

    run_state_machine_as_test(
        ArchiveMachine,
        settings=settings(
            max_examples=examples(10),
            stateful_step_count=6,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )


def test_random_batches_on_a_sharded_archive_keep_tree_equal_to_storage(
    owner: Actor, dandiset: str, s3_storage: str, request: pytest.FixtureRequest
) -> None:
    """Loose uploads, pack batches (some with a corrupted member), cancels and deletes on a
    sharded archive; compaction runs often. After every step the tree equals what storage
    holds (loose objects and shard members' bytes) and reads give the model's bytes."""
    request.getfixturevalue("settings").DANDIZARR_SHARD_COMPACT_PERCENT = 10
    counter = [0]

    class ShardedMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            counter[0] += 1
            response = owner.client.post(
                "/api/zarr/",
                {"name": f"s{counter[0]}", "dandiset": dandiset, "layout": "sharded"},
                format="json",
            )
            self.zarr_id = response.json()["zarr_id"]
            self.model: dict[str, bytes] = {}

        @rule(
            batch=st.dictionaries(
                st.sampled_from(PATHS), st.sampled_from(CONTENTS), min_size=1, max_size=4
            ),
            cancel=st.booleans(),
        )
        def loose_batch(self, batch: dict[str, bytes], cancel: bool) -> None:
            response = owner.client.post(
                f"/api/zarr/{self.zarr_id}/upload/",
                [{"path": p, "etag": md5(b)} for p, b in batch.items()],
                format="json",
            )
            assert response.status_code == 200, response.content
            for target in response.json():
                put(target["upload_url"], batch[target["path"]])
            if cancel:
                packed = set(
                    ShardMember.objects.filter(archive__zarr_id=self.zarr_id).values_list(
                        "path", flat=True
                    )
                )
                assert owner.client.delete(f"/api/zarr/{self.zarr_id}/upload/").status_code == 204
                for path, body in batch.items():
                    # A packed file keeps its bytes in its shard; a loose one it replaced is gone.
                    if path not in packed and self.model.get(path) != body:
                        self.model.pop(path, None)
                return
            response = owner.client.post(f"/api/zarr/{self.zarr_id}/upload/complete/")
            assert response.status_code == 200, response.content
            self.model.update(batch)

        @rule(
            batch=st.dictionaries(
                st.sampled_from(PATHS), st.sampled_from(CONTENTS), min_size=1, max_size=6
            ),
            split=st.integers(0, 6),
            corrupt=st.booleans(),
        )
        def pack_batch(self, batch: dict[str, bytes], split: int, corrupt: bool) -> None:
            paths = sorted(batch)
            groups = [g for g in (paths[:split], paths[split:]) if g]
            declarations, bodies = [], {}
            corrupted = None
            for index, group in enumerate(groups):
                sink = io.BytesIO()
                built = build_shard(
                    (len(group),), ((p, i, batch[p]) for i, p in enumerate(group)), sink
                )
                body = bytearray(sink.getvalue())
                members = [
                    {"path": r.path, "md5": r.md5, "size": r.length, "offset": r.offset}
                    for r in built.members
                ]
                if corrupt and corrupted is None:
                    victim = next((r for r in built.members if r.length), None)
                    if victim is not None:
                        body[victim.offset] ^= 0xFF
                        corrupted = victim.path
                name = f"shard{index}"
                bodies[name] = bytes(body)
                declarations.append(
                    {"name": name, "etag": md5(bytes(body)), "size": len(body), "members": members}
                )
            response = owner.client.post(
                f"/api/zarr/{self.zarr_id}/upload/", {"shards": declarations}, format="json"
            )
            assert response.status_code == 200, response.content
            for target in response.json()["shards"]:
                put(target["upload_url"], bodies[target["name"]])
            response = owner.client.post(f"/api/zarr/{self.zarr_id}/upload/complete/")
            assert response.status_code == 200, response.content
            state = owner.client.get(
                f"/api/zarr/{self.zarr_id}/batches/{response.json()['batch']}/"
            ).json()
            if corrupted is not None:
                assert state["state"] == "failed" and repr(corrupted) in state["error"]
            else:
                assert state["state"] == "applied", state
                self.model.update(batch)

        @rule(data=st.data())
        def delete_files(self, data: Any) -> None:
            if not self.model:
                return
            paths = data.draw(
                st.lists(st.sampled_from(sorted(self.model)), min_size=1, unique=True)
            )
            response = owner.client.delete(
                f"/api/zarr/{self.zarr_id}/files/", [{"path": p} for p in paths], format="json"
            )
            assert response.status_code == 204, response.content
            for path in paths:
                del self.model[path]

        @invariant()
        def tree_equals_storage(self) -> None:
            assert_tree_matches_storage(self.zarr_id)
            response = owner.client.get(f"/api/zarr/{self.zarr_id}/files/", {"recursive": "true"})
            listed = (
                {f["path"]: f["digest"] for f in response.json()["results"]}
                if response.status_code == 200
                else {}
            )
            assert listed == {p: md5(b) for p, b in self.model.items()}

    run_state_machine_as_test(
        ShardedMachine,
        settings=settings(
            max_examples=examples(10),
            stateful_step_count=6,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
