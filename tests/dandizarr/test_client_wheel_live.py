"""The service serves its own client (issue #38): the home page's install command is
``pip install <this server>/client/dandizarr-X.Y.Z-py3-none-any.whl``; run in a fresh venv
elsewhere it installs the client of the server's version, without Django, and the CLI runs."""

from __future__ import annotations

import html
import re
import zipfile
from pathlib import Path

import pytest
import requests

import dandizarr
from tests.support.processes import Processes
from tests.support.wheel_install import install, run

pytestmark = pytest.mark.timeout(600)  # pip installs the client's dependencies

INSTALL_COMMAND = re.compile(r"pip install (\S+\.whl)")


def test_pip_installs_the_client_from_the_served_url(tmp_path: Path, processes: Processes) -> None:
    with processes.serve(tmp_path / "var") as (url, _token):
        home = requests.get(url + "/", timeout=30)
        assert home.status_code == 200
        found = INSTALL_COMMAND.search(html.unescape(home.text))
        assert found is not None, home.text
        wheel_url = found.group(1)
        assert wheel_url == f"{url}/client/dandizarr-{dandizarr.__version__}-py3-none-any.whl"
        served = requests.get(wheel_url, timeout=60)
        assert served.status_code == 200
        # Built once, kept under the data directory: the same bytes again.
        assert requests.get(wheel_url, timeout=60).content == served.content
        (tmp_path / "served.whl").write_bytes(served.content)
        with zipfile.ZipFile(tmp_path / "served.whl") as wheel:
            assert wheel.testzip() is None
            names = wheel.namelist()
        assert "dandizarr/cli.py" in names
        # The client alone (issue #47: it had shipped the server's source).
        assert not any(name.startswith("dandizarr_server/") for name in names)
        assert not any("__pycache__" in name for name in names)

        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        client = install(wheel_url, tmp_path / "client-venv")
        assert "usage: dandizarr" in run(client, "dandizarr", "--help", cwd=elsewhere).stdout
        version = run(client, "dandizarr", "--version", cwd=elsewhere).stdout
        assert dandizarr.__version__ in version
        done = run(
            client,
            "python",
            "-c",
            "import importlib.util as u; print(u.find_spec('django'))",
            cwd=elsewhere,
        )
        assert done.stdout.strip() == "None"  # the client alone: Django is the server extra
        (elsewhere / "data").mkdir()
        (elsewhere / "data" / "a").write_text("hello\n")
        assert run(client, "dandizarr", "checksum", "data", cwd=elsewhere).stdout.strip()
        server = run(
            client,
            "python",
            "-c",
            "import importlib.util as u; print(u.find_spec('dandizarr_server'))",
            cwd=elsewhere,
        )
        assert server.stdout.strip() == "None"
