"""docker-compose.yml sets no environment variable the settings would silently ignore."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterable
from typing import Any

import pytest

from dandizarr_server.environment import ENVIRONMENT_VARIABLES_READ
from tests.support.ci import skip_here_fail_in_ci
from tests.support.compose import REPO, interpolate, load_compose, service_environment
from tests.support.processes import Processes

DANDIZARR_SERVICES = ["web", "reads", "worker", "beat"]


def variables_not_read(names: Iterable[str], read: set[str]) -> list[str]:
    return sorted(set(names) - read)


def settings_variables_read() -> set[str]:
    """The variables the settings read (recorded by dandizarr_server.environment as they load)."""
    from django.conf import settings

    importlib.import_module(settings.SETTINGS_MODULE)
    return set(ENVIRONMENT_VARIABLES_READ)


@pytest.mark.parametrize("service", DANDIZARR_SERVICES)
def test_every_variable_set_is_read_by_the_settings(service: str) -> None:
    environment = service_environment(load_compose()["services"][service])
    assert "DANDIZARR_STORAGE" in environment  # the file was really parsed
    assert variables_not_read(environment, settings_variables_read()) == []


def test_an_unknown_variable_is_reported() -> None:
    read = settings_variables_read()
    assert "DANDIZARR_S3_BUCKET" in read
    environment = service_environment(
        {"environment": ["DANDIZARR_S3_BUCKET=b", "DANDIZARR_S3_BUKET=typo"]}
    )
    assert environment == {"DANDIZARR_S3_BUCKET": "b", "DANDIZARR_S3_BUKET": "typo"}
    assert variables_not_read(environment, read) == ["DANDIZARR_S3_BUKET"]


def test_workers_can_be_scaled() -> None:
    services = load_compose()["services"]
    worker = services["worker"]
    assert "container_name" not in worker
    assert "ports" not in worker
    assert "exec celery -A dandizarr_server.celery worker" in " ".join(worker["command"])
    assert services["beat"]["command"][:4] == ["celery", "-A", "dandizarr_server.celery", "beat"]
    web_command = " ".join(services["web"]["command"])
    assert web_command.index("migrate") < web_command.index("gunicorn dandizarr_server.wsgi")
    for module in ("dandizarr_server.celery", "dandizarr_server.wsgi"):
        assert importlib.util.find_spec(module) is not None


def test_interpolate() -> None:
    host = {"SET": "value", "EMPTY": ""}
    assert interpolate("a${SET}b$${SET}", host) == "avalueb${SET}"
    assert interpolate("${EMPTY:-fallback} ${UNSET:-x}", host) == "fallback x"
    with pytest.raises(ValueError, match="needed"):
        interpolate("${UNSET:?needed}", host)


def test_the_compose_environment_configures_s3_postgres_and_redis(processes: Processes) -> None:
    """The settings module, loaded with exactly the web service's environment."""
    environment = service_environment(load_compose()["services"]["web"])
    with pytest.raises(ValueError, match="DANDIZARR_SECRET_KEY"):
        interpolate(environment["DANDIZARR_SECRET_KEY"], {})
    host = {"DANDIZARR_SECRET_KEY": "a-secret-from-the-host", "S3_SECRET_KEY": "s3-secret"}
    resolved = {name: interpolate(value, host) for name, value in environment.items()}
    script = (
        "import json, dandizarr_server.settings as s; print(json.dumps({"
        "'storage': s.DANDIZARR_STORAGE, 'endpoint': s.DANDIZARR_S3_ENDPOINT_URL,"
        "'presign': s.DANDIZARR_S3_PRESIGN_ENDPOINT_URL, 'key': s.DANDIZARR_S3_ACCESS_KEY_ID,"
        "'engine': s.DATABASES['default']['ENGINE'], 'broker': s.CELERY_BROKER_URL,"
        "'eager': s.CELERY_TASK_ALWAYS_EAGER, 'secret': s.SECRET_KEY, 'debug': s.DEBUG}))"
    )
    result = processes.run(
        [sys.executable, "-c", script],
        env={"PATH": os.environ.get("PATH", ""), **resolved},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded == {
        "storage": "s3",
        "endpoint": "http://s3:8333",
        "presign": "http://localhost:8333",
        "key": "dandizarr",
        "engine": "django.db.backends.postgresql",
        "broker": "redis://redis:6379/0",
        "eager": False,
        "secret": "a-secret-from-the-host",
        "debug": False,
    }


def test_production_gunicorn_cuts_off_slow_clients() -> None:
    """The web service runs the worker of ``dandizarr serve`` (dandizarr_server.gunicorn_config),
    not
    gunicorn's sync worker, which any slow client holds (tests/dandizarr/
    test_serve_slow_clients_live.py shows the worker's limits)."""
    config = "-c python:dandizarr_server.gunicorn_config"
    assert config in " ".join(load_compose()["services"]["web"]["command"])
    dockerfile = (REPO / "Dockerfile").read_text()
    cmd = json.loads(dockerfile.split("\nCMD ", 1)[1].splitlines()[0])
    assert config in " ".join(cmd)
    gunicorn_config = importlib.import_module("dandizarr_server.gunicorn_config")
    assert gunicorn_config.worker_class.__name__ == "HeadFirstThreadWorker"


def test_every_image_is_pinned() -> None:
    """No ``latest`` and no bare name: every image names its version."""
    for name, service in load_compose()["services"].items():
        image = str(service["image"])
        repository, _, tag = image.rpartition(":")
        assert repository and tag and tag != "latest", (name, image)
        assert any(ch.isdigit() for ch in tag), (name, image)


def _compose_spec() -> dict[str, Any]:
    """The compose-spec JSON schema from Docker's docker-compose wheel (make compose-schema)."""
    import zipfile

    wheels = sorted((REPO / ".venv-compose-schema").glob("docker_compose-*.whl"))
    if not wheels:
        message = "the compose-spec schema is missing: run `make compose-schema` (make test does)"
        skip_here_fail_in_ci(message)
    with zipfile.ZipFile(wheels[-1]) as wheel:
        schema: dict[str, Any] = json.loads(wheel.read("compose/config/compose_spec.json"))
    return schema


def test_the_file_is_valid_compose() -> None:
    import copy

    import jsonschema

    schema = _compose_spec()
    validator = jsonschema.validators.validator_for(schema)(schema)
    compose = load_compose()
    errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []
    broken = copy.deepcopy(compose)
    broken["services"]["web"]["healthcheck"]["retries"] = "thirty"
    broken["services"]["worker"]["depends_on"]["web"]["condition"] = "service_happy"
    assert len(list(validator.iter_errors(broken))) == 2  # the validator does validate
