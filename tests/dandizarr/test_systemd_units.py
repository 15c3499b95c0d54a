"""The systemd units in deploy/systemd/ (docs/deploying.md): each is a unit systemd accepts,
whose programs exist in an install of the wheel (``systemd-analyze verify`` with the install's
directory replaced by this venv's), with the settings' file and the commands the docs give.
The web unit's command is the one tests/dandizarr/test_wheel_install_live.py serves with."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ci import skip_here_fail_in_ci
from tests.support.systemd_units import INSTALLED_BIN, UNITS, exec_start, unit

NAMES = sorted(p.name for p in UNITS.glob("*.service"))


def test_the_units_are_the_three_services() -> None:
    assert NAMES == ["dandizarr-beat.service", "dandizarr-web.service", "dandizarr-worker.service"]
    assert exec_start("dandizarr-web.service")[:4] == [
        *("gunicorn", "dandizarr_server.wsgi", "-c", "python:dandizarr_server.gunicorn_config")
    ]
    assert exec_start("dandizarr-worker.service")[:4] == [
        "celery",
        "-A",
        "dandizarr_server.celery",
        "worker",
    ]
    assert exec_start("dandizarr-beat.service")[:4] == [
        "celery",
        "-A",
        "dandizarr_server.celery",
        "beat",
    ]
    for name in NAMES:
        service = unit(name)["Service"]
        assert service["EnvironmentFile"] == "/etc/dandizarr/env", name
        assert service["User"] == "dandizarr", name
    web = unit("dandizarr-web.service")["Service"]
    assert web["Environment"] == f"PROMETHEUS_MULTIPROC_DIR=/run/{web['RuntimeDirectory']}"


@pytest.mark.live  # systemd-analyze, a process
@pytest.mark.parametrize("name", NAMES)
def test_systemd_accepts_each_unit(name: str, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        skip_here_fail_in_ci("systemd-analyze is not installed (Debian's systemd; .ci/run)")
    environment = tmp_path / "env"
    environment.write_text("DJANGO_SETTINGS_MODULE=dandizarr_server.settings\n")
    text = (UNITS / name).read_text()
    text = text.replace(INSTALLED_BIN, f"{Path(sys.executable).parent}/")
    text = text.replace("/etc/dandizarr/env", str(environment))
    (tmp_path / name).write_text(text)
    done = subprocess.run(
        [str(analyze), "verify", str(tmp_path / name)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
