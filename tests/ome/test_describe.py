"""dandizarr.ome on real files: an NGFF 0.4 image written by ome-zarr, an NGFF 0.5 sharded
image written by zarr-python 3; validation by ome-zarr-models; dtype names; preview choice."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zarr
from ome_zarr.format import FormatV04
from ome_zarr.writer import write_image, write_plate_metadata, write_well_metadata

from dandizarr.ome import (
    DOCUMENT_NAMES,
    Axis,
    Channel,
    Image,
    Level,
    describe,
    dtype_name,
    parse_document,
)
from dandizarr.ome import neuroglancer_state as ng
from dandizarr.ome.preview_choice import choose
from dandizarr.ome.validation import validate
from tests.support.ome_files import ngff_v3_sharded, ome_zarr_v2


def documents(files: dict[str, bytes]) -> dict[str, dict]:
    docs = {}
    for path, raw in files.items():
        if path.rsplit("/", 1)[-1] in DOCUMENT_NAMES:
            doc = parse_document(raw)
            assert doc is not None
            docs[path] = doc
    return docs


def test_ome_zarr_v2_image_is_described_and_valid(tmp_path: Path) -> None:
    docs = documents(ome_zarr_v2(tmp_path))
    summary = validate(docs, describe(docs))
    image, label = summary.images
    assert (image.path, image.version, image.zarr_format, image.name) == ("", "0.4", 2, "cells")
    assert [(a.name, a.type, a.unit) for a in image.axes] == [
        ("c", "channel", None), ("z", "space", "micrometer"),
        ("y", "space", "micrometer"), ("x", "space", "micrometer"),
    ]  # fmt: skip
    assert [lv.path for lv in image.levels] == ["s0", "s1", "s2"]
    assert image.levels[0].shape == (2, 8, 96, 128) and image.levels[0].chunks == (1, 4, 32, 32)
    assert image.levels[1].scale == (1.0, 2.0, 1.0, 1.0) and image.levels[1].dtype == "uint16"
    assert image.voxel_size == (
        ("z", 2.0, "micrometer"),
        ("y", 0.5, "micrometer"),
        ("x", 0.5, "micrometer"),
    )
    assert [(c.label, c.color, c.window) for c in image.channels] == [
        ("DAPI", "0000FF", (0.0, 1500.0)), ("GFP", "00FF00", (200.0, 2500.0)),
    ]  # fmt: skip
    assert image.labels == ("labels/nuclei",) and not image.is_label
    assert label.path == "labels/nuclei" and label.is_label
    assert [c.kind for c in summary.collections] == ["labels"]
    assert all(v.valid for v in summary.validations), summary.validations
    assert {v.model for v in summary.validations} == {
        "v04.image.Image", "v04.image_label.ImageLabel", "v04.labels.LabelsAttrs",
    }  # fmt: skip
    assert "s0" in summary.level_paths and "labels/nuclei/s4" in summary.level_paths


def test_ngff_v3_sharded_image_is_described_and_valid(tmp_path: Path) -> None:
    docs = documents(ngff_v3_sharded(tmp_path))
    summary = validate(docs, describe(docs))
    (image,) = summary.images
    assert (image.path, image.version, image.zarr_format) == ("image", "0.5", 3)
    assert image.levels[0].chunks == (1, 2, 64, 64) and image.levels[0].inner_chunks == (
        1,
        1,
        32,
        32,
    )
    assert image.levels[1].shape == (2, 6, 80, 60) and image.levels[1].scale[2:] == (0.5, 0.5)
    (verdict,) = summary.validations
    assert verdict.valid and verdict.model == "v05.image.Image"
    assert summary.as_json()["images"][0]["voxel_size"][0] == {
        "axis": "z", "size": 1.5, "unit": "micrometer",
    }  # fmt: skip


def test_invalid_metadata_gives_each_error_with_its_path(tmp_path: Path) -> None:
    files = ome_zarr_v2(tmp_path)
    attrs = json.loads(files[".zattrs"])
    attrs["multiscales"][0]["axes"][1]["unit"] = "parsecs"  # not a UDUNITS name
    attrs["multiscales"][0]["axes"].append({"name": "w", "type": "space"})  # 4 space axes
    files[".zattrs"] = json.dumps(attrs).encode()
    docs = documents(files)
    summary = validate(docs, describe(docs))
    verdict = summary.validation_of("")
    assert verdict is not None and not verdict.valid
    paths = [e.path for e in verdict.errors]
    assert all(p.startswith(".zattrs#multiscales/0") for p in paths), verdict.errors
    assert any("axes" in p for p in paths)
    # The description stays readable; the level arrays' 4 dimensions against 5 axes is named.
    image = summary.images[0]
    assert any("has 4 dimensions, the axes 5" in p.message for p in image.problems)


@pytest.mark.parametrize(
    "hostile",
    [
        {"multiscales": "nope"},
        {"multiscales": [{"axes": 3, "datasets": [{"path": 5}]}]},
        {"multiscales": [{"axes": [{"name": "x"}], "datasets": [{"path": "../../etc"}]}]},
        {
            "multiscales": [
                {
                    "datasets": [
                        {
                            "path": "s0",
                            "coordinateTransformations": [{"type": "scale", "scale": ["a"]}],
                        }
                    ]
                }
            ],
            "omero": {"channels": [1, {"color": "zz", "window": []}]},
        },
        {"plate": {"wells": [{"path": 1}, "x"]}, "well": None, "labels": {"a": 1}},
    ],
)
def test_hostile_metadata_is_described_never_raised(hostile: dict) -> None:
    docs = {".zgroup": {"zarr_format": 2}, ".zattrs": hostile}
    summary = validate(docs, describe(docs))
    assert summary.as_json()["is_ome"] in (True, False)
    assert all(not v.valid for v in summary.validations)


def test_v2_dtypes_are_named_as_people_read_them() -> None:
    assert dtype_name(2, "<u2") == "uint16"
    assert dtype_name(2, ">f4") == "float32, big-endian"
    assert dtype_name(2, "|u1") == "uint8"
    assert dtype_name(2, "|O") == "object"
    assert (
        dtype_name(2, [["x", "<i4"], ["y", ">f8", [2]]])
        == "struct {x: int32, y: float64, big-endian[2]}"
    )
    assert dtype_name(2, "<U5") == "unicode string of 5"
    assert dtype_name(2, "nonsense") == "nonsense"
    assert dtype_name(3, "uint16") == "uint16"


def test_preview_picks_the_smallest_level_that_fills_the_picture(tmp_path: Path) -> None:
    docs = documents(ome_zarr_v2(tmp_path))
    image = describe(docs).images[0]
    # Levels 96x128, 48x64, 24x32: a 64-pixel picture takes s1, a 512 one s0.
    choice = choose(image, 64, lambda level, planes: True)
    assert choice is not None and choice.level.path == "s1"
    assert choice.selections == ((0, 4, None, None), (1, 4, None, None))
    assert [c.color for c in choice.channels] == [(0, 0, 255), (0, 255, 0)]
    assert [c.window for c in choice.channels] == [(0.0, 1500.0), (200.0, 2500.0)]
    big = choose(image, 512, lambda level, planes: True)
    assert big is not None and big.level.path == "s0"
    # A budget that refuses the larger levels gets a smaller one.
    small = choose(image, 64, lambda level, planes: level.path == "s2")
    assert small is not None and small.level.path == "s2"
    assert choose(image, 64, lambda level, planes: False) is None


def test_neuroglancer_state_opens_the_image_from_the_base_url(tmp_path: Path) -> None:
    docs = documents(ngff_v3_sharded(tmp_path))
    image = describe(docs).images[0]
    state = ng.image_state(image, "http://host/zarr/abc/")
    assert [layer["source"] for layer in state["layers"]] == [
        "zarr3://http://host/zarr/abc/image/"
    ] * 2
    assert state["dimensions"] == {"z": [1.5e-6, "m"], "y": [2.5e-7, "m"], "x": [2.5e-7, "m"]}
    assert state["position"] == [3.0, 80.0, 60.0]
    assert state["layers"][1]["shaderControls"] == {"normalized": {"range": [200.0, 2500.0]}}
    assert "#00ff00" in state["layers"][1]["shader"]
    link = ng.viewer_link(state)
    assert link.startswith("/neuroglancer/v/dandizarr/#!%7B")
    v2 = ng.array_state("http://host/zarr/abc/", "a/b", 2, (4, 5, 6))
    assert v2["layers"][0]["source"] == "zarr2://http://host/zarr/abc/a/b/"


def test_plate_and_well_written_by_ome_zarr_are_listed_and_validated(tmp_path: Path) -> None:
    root = tmp_path / "plate.zarr"
    plate = zarr.open_group(str(root), mode="w", zarr_format=2)
    fmt = FormatV04()
    write_plate_metadata(plate, ["A"], ["1", "2"], ["A/1", "A/2"], fmt=fmt, name="screen")
    for column in ("1", "2"):
        well = plate.require_group(f"A/{column}")
        write_well_metadata(well, ["0"], fmt=fmt)
        data = np.zeros((1, 16, 16), "uint8")
        write_image(data, well.require_group("0"), scale_factors=(), axes="cyx", fmt=fmt)
    files = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    docs = documents(files)
    summary = validate(docs, describe(docs))
    kinds = {(c.path, c.kind) for c in summary.collections}
    assert kinds == {("", "plate"), ("A/1", "well"), ("A/2", "well")}
    plate_entry = next(c for c in summary.collections if c.kind == "plate")
    assert plate_entry.members == ("A/1", "A/2") and plate_entry.name == "screen"
    assert sorted(i.path for i in summary.images) == ["A/1/0", "A/2/0"]
    assert all(v.valid for v in summary.validations), summary.validations
    assert {v.model for v in summary.validations} >= {"v04.hcs.HCSAttrs", "v04.well.WellAttrs"}


def test_a_document_listing_thousands_of_images_and_channels_is_cut(tmp_path: Path) -> None:
    multiscale = {"axes": [{"name": "c", "type": "channel"}], "datasets": []}
    attrs = {
        "multiscales": [multiscale] * 5000,
        "omero": {"channels": [{"label": str(i)} for i in range(10000)]},
    }
    summary = describe({".zgroup": {"zarr_format": 2}, ".zattrs": attrs})
    assert len(summary.images) == 64 and len(summary.images[0].channels) == 64


def test_preview_of_a_tczyx_image_takes_the_middle_z_plane_of_the_middle_time_point() -> None:
    axes = tuple(
        Axis(name, kind, None)
        for name, kind in [
            ("t", "time"),
            ("c", "channel"),
            ("z", "space"),
            ("y", "space"),
            ("x", "space"),
        ]
    )
    level = Level(
        "0", (5, 3, 9, 600, 700), (1, 1, 1, 64, 64), None, "uint8", (1.0,) * 5, (0.0,) * 5
    )
    channels = (
        Channel("a", "FF0000", (0.0, 10.0), True),
        Channel("b", "00FF00", None, False),
        Channel("c", "0000FF", None, True),
    )
    image = Image("", 2, "0.4", None, axes, (level,), channels, (), False)
    choice = choose(image, 512, lambda level, planes: planes == 2)
    assert choice is not None
    assert choice.selections == ((2, 0, 4, None, None), (2, 2, 4, None, None))
    assert [c.color for c in choice.channels] == [(255, 0, 0), (0, 0, 255)]
