"""The shell commands of README.md and docs/deploying.md (their ```sh blocks) are run as a
reader would run them, where this machine can (issue #38); each other block is named here with
why it is not, and a new block fails the first test until it is one or the other.

Run as written, but for the substitutions a test environment needs (each listed with its
block): the service's port (a free one, not 8000), the archive's id where the text says
ZARR_ID, and the native install's paths (/opt/dandizarr/bin is the checkout's .venv/bin,
/etc/dandizarr/env a file of the test's settings)."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import requests

from tests.support.processes import Processes
from tests.support.seaweedfs import ACCESS_KEY, REGION, SECRET_KEY, SeaweedS3

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ("README.md", "docs/deploying.md")
_SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Skipped:
    why: str


RUN = "run"
# Each block by its document and the start of its first line: run below, or why not.
BLOCKS: dict[tuple[str, str], str | Skipped] = {
    ("README.md", "make serve"): Skipped(
        "runs until stopped; tests/dandizarr/test_serve_live.py runs its `dandizarr serve`"
    ),
    ("README.md", "apt-get install -y postgresql"): Skipped(
        "installs and starts system services as root; .ci/run does it on a fresh machine"
    ),
    ("README.md", "export DANDIZARR_URL="): RUN,
    ("README.md", ".venv/bin/dandizarr ls ZARR_ID"): RUN,
    ("README.md", ".venv-dandi/bin/dandi download"): Skipped(
        "the real dandi client (make dandi-venvs); tests/dandi_compat/ runs its upload and download"
    ),
    ("docs/deploying.md", "DANDIZARR_SECRET_KEY=$(openssl"): Skipped(
        "docker compose pulls images from Docker Hub, unreachable here; "
        "tests/dandizarr/test_compose_live.py runs each service's command natively"
    ),
    ("docs/deploying.md", "python3 -m pip wheel"): Skipped(
        "writes to /opt; tests/dandizarr/test_wheel_install_live.py builds and installs the wheel "
        "this way into a temporary venv"
    ),
    ("docs/deploying.md", 'su postgres -c "createuser'): Skipped(
        "makes a role in the machine's own cluster, as root; the tests make a database of their "
        "own on the test cluster (service_database)"
    ),
    ("docs/deploying.md", "/opt/dandizarr/bin/weed mini"): Skipped(
        "runs until stopped; tests/support/seaweedfs.py starts the same `weed mini` on ports of "
        "its own for every S3 test"
    ),
    ("docs/deploying.md", "set -a && . /etc/dandizarr/env"): RUN,
    ("docs/deploying.md", "/opt/dandizarr/bin/gunicorn"): Skipped(
        "three services that run until stopped; tests/dandizarr/test_wheel_install_live.py runs "
        "this gunicorn command, tests/dandizarr/test_compose_live.py the worker and beat"
    ),
    ("docs/deploying.md", "python manage.py users add"): RUN,
    ("docs/deploying.md", "docker compose exec postgres"): Skipped(
        "docker compose (above); tests/zarr_api/test_backup_restore_live.py dumps and restores "
        "with pg_dump and pg_restore natively, then audits"
    ),
    ("docs/deploying.md", "rm -rf var"): RUN,
}


def sh_blocks() -> Iterator[tuple[str, str]]:
    """(document, block) for each ```sh block of the documents."""
    for document in DOCUMENTS:
        for block in _SH_BLOCK.findall((ROOT / document).read_text()):
            yield document, block


def block(document: str, start: str) -> str:
    found = [b for d, b in sh_blocks() if d == document and b.startswith(start)]
    assert len(found) == 1, (document, start, len(found))
    return found[0]


def test_every_shell_block_is_run_or_says_why_not() -> None:
    seen = set()
    for document, text in sh_blocks():
        keys = [key for key in BLOCKS if key[0] == document and text.startswith(key[1])]
        assert len(keys) == 1, f"{document}: classify this block in BLOCKS:\n{text}"
        seen.add(keys[0])
    assert seen == set(BLOCKS), (
        f"BLOCKS names blocks the documents no longer have: {set(BLOCKS) - seen}"
    )


def bash(processes: Processes, text: str, cwd: Path, env: dict[str, str]) -> str:
    done = processes.run(
        ["bash", "-euo", "pipefail", "-c", text],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"{text}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    return done.stdout


def clean_env(**extra: str) -> dict[str, str]:
    return {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DANDIZARR_", "CELERY_", "DJANGO_")) and k != "DATABASE_URL"
        },
        "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        **extra,
    }


def a_checkout(directory: Path) -> Path:
    """A directory laid out as the checkout is for the commands (.venv, manage.py), whose own
    files (var/, sample.zarr, tokens) stay out of the real one."""
    directory.mkdir(parents=True)
    (directory / ".venv").symlink_to(ROOT / ".venv")
    (directory / "manage.py").symlink_to(ROOT / "manage.py")
    return directory


def test_readme_first_upload(tmp_path: Path, processes: Processes) -> None:
    checkout = a_checkout(tmp_path / "checkout")
    with processes.serve(checkout / "var") as (url, token):
        upload = block("README.md", "export DANDIZARR_URL=").replace("http://127.0.0.1:8000", url)
        out = bash(processes, upload, checkout, clean_env())
        found = requests.get(
            f"{url}/api/zarr/", params={"dandiset": "000001", "name": "sample.zarr"}, timeout=30
        ).json()["results"]
        assert len(found) == 1 and found[0]["checksum"], found
        zarr_id = found[0]["zarr_id"]
        # The upload's verified checksum, and the local one `dandizarr checksum` printed.
        assert out.count(found[0]["checksum"]) == 2, out
        read = block("README.md", ".venv/bin/dandizarr ls ZARR_ID").replace("ZARR_ID", zarr_id)
        # In the reader's shell still: the first block's exports hold.
        exported = clean_env(DANDIZARR_URL=url, DANDIZARR_TOKEN=token)
        bash(processes, read, checkout, exported)
    assert (checkout / "copy.zarr" / "zarr.json").is_file()


def test_deploying_native_setup_and_users(
    tmp_path: Path,
    processes: Processes,
    service_database: str,
    seaweedfs: SeaweedS3,
) -> None:
    bucket = f"docs-{uuid.uuid4().hex[:12]}"
    settings = {
        "DJANGO_SETTINGS_MODULE": "dandizarr_server.settings",
        "DANDIZARR_SECRET_KEY": "doc-commands-test-" + "k" * 40,
        "DANDIZARR_DATA_DIR": str(tmp_path / "data"),
        "DATABASE_URL": service_database,
        "DANDIZARR_STORAGE": "s3",
        "DANDIZARR_S3_ENDPOINT_URL": seaweedfs.endpoint_url,
        "DANDIZARR_S3_BUCKET": bucket,
        "DANDIZARR_S3_REGION": REGION,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    }
    env_file = tmp_path / "env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    setup = (
        block("docs/deploying.md", "set -a && . /etc/dandizarr/env")
        .replace("/etc/dandizarr/env", str(env_file))
        .replace("/opt/dandizarr/bin/", f"{ROOT / '.venv' / 'bin'}/")
    )
    out = bash(processes, setup, tmp_path, clean_env())
    assert f"bucket {bucket} ready (versioning enabled)" in out
    assert (tmp_path / "data" / "admin-token").is_file()

    # The users block makes dandiset 000001 itself (a fresh install has none), as an
    # operator would.
    checkout = a_checkout(tmp_path / "checkout")
    assert (tmp_path / "data" / "admin-token").read_text().strip()
    users = block("docs/deploying.md", "python manage.py users add")
    out = bash(processes, users, checkout, clean_env(**settings))
    assert "000001" in out.splitlines() and "bob owns dandiset 000001" in out
    assert (checkout / "alice.token").stat().st_mode & 0o777 == 0o600
    # The token issued to the default file was replaced by the one in alice.token: its file
    # went with it (no dead token left behind).
    assert not (tmp_path / "data" / "tokens" / "alice").exists()
    # Revoked last: no token of hers is left.
    from_file = (checkout / "alice.token").read_text().strip()
    assert from_file not in out


def test_starting_over(tmp_path: Path, processes: Processes) -> None:
    (tmp_path / "var" / "objects").mkdir(parents=True)
    (tmp_path / "var" / "db.sqlite3").write_text("")
    bash(processes, block("docs/deploying.md", "rm -rf var"), tmp_path, clean_env())
    assert not (tmp_path / "var").exists()
