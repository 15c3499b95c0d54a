"""Random sequences of batches, cancels and deletes; the tree must always equal storage."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from tests.zarr_api.conftest import Actor, md5, put, storage_listing
from tests.zarr_api.tree_check import assert_tree_matches_storage

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
            max_examples=10,
            stateful_step_count=6,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
