"""``dandizarr upload`` checks an OME-Zarr against the OME-NGFF spec before sending anything:
a warning for an invalid one, a refusal with ``--strict``; valid ones and plain Zarr pass
silently. Files written by ome-zarr (NGFF 0.4) and zarr-python 3 (NGFF 0.5, sharded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dandizarr.cli import main
from dandizarr.commands.upload import check_ome, ome_problems
from tests.support.ome_files import ngff_v3_sharded, ome_zarr_v2
from tests.support.processes import free_port

# A server nobody listens on: these runs stop before or at their first request.
DEAD = ["--server", "http://127.0.0.1:{port}", "--token", "t", "--no-progress"]


def write(files: dict[str, bytes], root: Path) -> Path:
    for name, body in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    return root


def dead_server() -> list[str]:
    port = free_port()
    return [arg.format(port=port) for arg in DEAD]


def broken_v2(tmp_path: Path) -> Path:
    root = write(ome_zarr_v2(tmp_path), tmp_path / "broken.zarr")
    attrs = json.loads((root / ".zattrs").read_text())
    attrs["multiscales"][0]["axes"][1]["type"] = "spaceship"
    del attrs["multiscales"][0]["datasets"][0]["coordinateTransformations"]
    (root / ".zattrs").write_text(json.dumps(attrs))
    return root


def test_strict_refuses_an_invalid_ome_zarr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = broken_v2(tmp_path)
    status = main(["upload", str(root), "--dandiset", "000001", "--strict", *dead_server()])
    err = capsys.readouterr().err
    assert status == 1
    assert "is not valid OME-NGFF" in err and "(refused: --strict)" in err
    assert ".zattrs#multiscales/0/datasets/0/coordinateTransformations: Field required" in err
    assert "Connection" not in err  # refused before any request


def test_an_invalid_ome_zarr_is_a_warning_without_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = broken_v2(tmp_path)
    check_ome(str(root), strict=False)  # what run() does first (then it uploads)
    err = capsys.readouterr().err
    assert "dandizarr: warning:" in err and "is not valid OME-NGFF" in err
    assert "datasets/0/coordinateTransformations" in err and "(refused" not in err


@pytest.mark.parametrize("writer", [ome_zarr_v2, ngff_v3_sharded])
def test_valid_ome_zarr_passes_silently(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], writer: object
) -> None:
    root = write(writer(tmp_path), tmp_path / "ok.zarr")  # type: ignore[operator]
    assert ome_problems(str(root)) == []
    check_ome(str(root), strict=True)
    assert capsys.readouterr().err == ""


def test_plain_zarr_is_not_checked(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / ".zarray").write_text('{"zarr_format": 2, "shape": [1]}')
    assert ome_problems(str(tmp_path)) == []
