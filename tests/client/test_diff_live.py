"""``dandizarr diff`` and ``dandizarr upload --dry-run`` (issue #49, diffs) with the CLI against
a live service: the changes exactly (paths relative to the archive, bytes), and a dry run sends
nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.live_client import Service


def write(root: Path, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)


FILES = {"zarr.json": b'{"zarr_format": 3}', "a/c/0": b"zero", "a/c/1": b"one", "b/x": b"x"}


def test_a_dry_run_sends_nothing_and_diff_names_the_changes(
    service: Service, tmp_path: Path
) -> None:
    first = tmp_path / "first.zarr"
    write(first, FILES)
    status, uploaded = service.cli_json("upload", str(first), "--dandiset", service.dandiset)
    assert status == 0 and uploaded["ok"], uploaded
    zarr_id = uploaded["zarr_id"]
    # The same tree changed: one file rewritten, one added, one gone.
    second = tmp_path / "second" / "first.zarr"
    shutil.copytree(first, second)
    write(second, {"a/c/1": b"ONE!", "a/c/2": b"two"})
    (second / "b" / "x").unlink()
    before = service.archive(zarr_id)
    status, planned = service.cli_json(
        "upload", str(second), "--dandiset", service.dandiset, "--dry-run"
    )
    assert status == 0, planned
    assert planned == {
        "added": ["a/c/2"],
        "modified": ["a/c/1"],
        "deleted": [],  # without --sync the archive keeps b/x
        "bytes_added": len(b"ONE!") + len(b"two"),
        "bytes_deleted": len(b"one"),
    }
    status, synced = service.cli_json(
        "upload", str(second), "--zarr-id", zarr_id, "--dry-run", "--sync"
    )
    assert synced["deleted"] == ["b/x"]
    # An archive the user may not read (or none), a dandiset that is not: an error, not
    # "every file added".
    unknown = "00000000-0000-4000-8000-000000000000"
    for target in (("--zarr-id", unknown), ("--dandiset", "999999")):
        refused = service.cli("upload", str(second), *target, "--dry-run")
        assert refused.returncode != 0 and "added" not in refused.stdout, target
    after = service.archive(zarr_id)
    assert (after["checksum"], after["modified"]) == (before["checksum"], before["modified"])
    assert service.api("GET", f"/api/zarr/{zarr_id}/upload/").status_code == 404

    # Uploaded for real into another archive: diff from the first to it says the same.
    status, other = service.cli_json(
        "upload", str(second), "--dandiset", service.dandiset, "--name", "second.zarr"
    )
    assert status == 0 and other["ok"], other
    status, diff = service.cli_json("diff", zarr_id, other["zarr_id"])
    assert status == 0
    assert diff == {**planned, "deleted": ["b/x"], "bytes_deleted": len(b"one") + len(b"x")}
    done = service.cli("diff", other["zarr_id"], zarr_id)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:3] == ["+ b/x", "~ a/c/1", "- a/c/2"]
    # A version the archive does not have: an error naming it, nothing printed as a diff.
    no_version = service.cli("diff", f"{zarr_id}@9", other["zarr_id"], "--json")
    assert no_version.returncode != 0 and "added" not in no_version.stdout
