"""nginx as the project configures it (``deploy/nginx.conf.template``), a process of this machine
in front of a service: the production shape's caching proxy (docs/deploying.md). The template
is rendered as docker-compose.yml's proxy service renders it (envsubst of exactly its five
variables), and nginx is Debian's package (.ci/run installs it)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path

import requests

from tests.support.processes import free_port
from tests.support.service_processes import ROOT, Process

TEMPLATE = ROOT / "deploy" / "nginx.conf.template"
VARIABLES = (
    "PROXY_LISTEN",
    "PROXY_UPSTREAM",
    "PROXY_READS_UPSTREAM",
    "PROXY_CACHE_DIR",
    "PROXY_RUN_DIR",
)


def nginx_binary() -> str | None:
    """Debian's nginx, on the PATH or where the package puts it."""
    found = shutil.which("nginx")
    if found is None and os.access("/usr/sbin/nginx", os.X_OK):
        found = "/usr/sbin/nginx"
    return found


def as_root() -> str:
    """What nginx's ``-g`` needs besides ``daemon off;`` here: as root its workers would run as
    nobody, who cannot enter a test's directory (the compose service runs all of it as an
    unprivileged user)."""
    return " user root;" if os.geteuid() == 0 else ""


def render(values: Mapping[str, str]) -> str:
    """The template with ``${NAME}`` of each of ``VARIABLES`` replaced, as ``envsubst
    '${PROXY_LISTEN} ...'`` does (nginx's own ``$variables`` untouched)."""
    text = TEMPLATE.read_text()
    for name in VARIABLES:
        text = text.replace("${" + name + "}", values[name])
    assert "${" not in text, "the template names a variable compose does not set"
    return text


class NginxProxy(Process):
    """nginx on a free port of 127.0.0.1 in front of ``upstream`` (``host:port``), the reads
    going to ``reads_upstream`` (by default the same); its access log (one line per request,
    ``cache=HIT`` when it asked no service) is ``log``."""

    def __init__(self, directory: Path, upstream: str, reads_upstream: str | None = None) -> None:
        binary = nginx_binary()
        assert binary is not None, "nginx is not installed (apt-get install nginx)"
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.cache_dir = directory / "cache"
        values = {
            "PROXY_LISTEN": f"127.0.0.1:{self.port}",
            "PROXY_UPSTREAM": upstream,
            "PROXY_READS_UPSTREAM": reads_upstream or upstream,
            "PROXY_CACHE_DIR": str(self.cache_dir),
            "PROXY_RUN_DIR": str(directory / "run"),
        }
        (directory / "run").mkdir(exist_ok=True)
        config = directory / "nginx.conf"
        config.write_text(render(values))
        argv = [binary, "-c", str(config), "-g", "daemon off;" + as_root()]
        super().__init__("nginx", argv, dict(os.environ), directory / "nginx.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        super().start()
        deadline = time.monotonic() + 30
        while True:
            with suppress(requests.RequestException):
                requests.get(self.url + "/healthz", timeout=5)
                return
            if not self.running() or time.monotonic() > deadline:
                raise RuntimeError(f"nginx did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)

    def cache_statuses(self, path: str) -> list[str]:
        """The cache status (``HIT``, ``MISS``, ``BYPASS``, ``-``: not cacheable) of every
        request for ``path`` so far, in order."""
        statuses = []
        for line in self.log.read_text().splitlines():
            if f" {path} HTTP/" in line and "cache=" in line:
                statuses.append(line.split("cache=", 1)[1].split(" ", 1)[0])
        return statuses
