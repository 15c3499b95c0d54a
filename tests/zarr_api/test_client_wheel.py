"""``GET /client/<wheel>``: the wheel of the server's own package files, with the installed
distribution's metadata (issue #38); any other name is a 404 that names the right one."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from io import BytesIO
from pathlib import Path
from typing import Any

from django.test import Client

import dandizarr
from dandizarr_server.client_wheel import wheel_name


def test_the_served_wheel_is_a_valid_wheel(db: None, settings: Any, tmp_path: Path) -> None:
    settings.DATA_DIR = tmp_path
    answer = Client().get(f"/client/{wheel_name()}")
    assert answer.status_code == 200
    assert wheel_name() in answer["Content-Disposition"]
    body = b"".join(answer.streaming_content)
    with zipfile.ZipFile(BytesIO(body)) as wheel:
        dist_info = f"dandizarr-{dandizarr.__version__}.dist-info"
        metadata = wheel.read(f"{dist_info}/METADATA").decode()
        assert "Name: dandizarr" in metadata
        assert f"Version: {dandizarr.__version__}" in metadata
        assert (
            "dandizarr = dandizarr.cli:main" in wheel.read(f"{dist_info}/entry_points.txt").decode()
        )
        record = wheel.read(f"{dist_info}/RECORD").decode().splitlines()
        names = set(wheel.namelist())
        # RECORD lists every file with its hash, as pip checks it.
        listed = {}
        for line in record:
            name, digest, _size = line.rsplit(",", 2)
            listed[name] = digest
        assert set(listed) == names
        for name, digest in listed.items():
            if digest:
                data = wheel.read(name)
                expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                assert digest == f"sha256={expected.decode()}", name
    assert "dandizarr_server/zarr_api/templates/dandizarr/home.html" in names
    assert list(tmp_path.glob(f"client/*/{wheel_name()}"))


def test_another_name_is_a_404_naming_the_wheel(db: None, settings: Any, tmp_path: Path) -> None:
    settings.DATA_DIR = tmp_path
    answer = Client().get("/client/dandizarr-0.0.1-py3-none-any.whl")
    assert answer.status_code == 404
    assert answer.json()["code"] == "not_found"
    assert wheel_name() in answer.json()["detail"]
    assert not (tmp_path / "client").exists()


def test_the_home_page_gives_the_install_command(db: None) -> None:
    page = Client().get("/").content.decode()
    assert f"pip install http://testserver/client/{wheel_name()}" in page
