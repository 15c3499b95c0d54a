# The dandizarr service image: web (gunicorn), Celery worker and beat all run from it.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY . .
# The server extra: Django, Celery, psycopg, boto3, gunicorn (`pip install .` alone is the client).
# All dependencies ship as wheels for linux/amd64 and arm64 (psycopg[binary], numpy, ...),
# so the slim image needs no compiler.
RUN pip install ".[server]" \
    && useradd --system --uid 1000 --home-dir /app dandizarr \
    && mkdir -p /data \
    && chown dandizarr /data

USER dandizarr
EXPOSE 8000

# docker-compose.yml sets the command per service (web migrates first).
CMD ["gunicorn", "dandizarr_server.wsgi", "-c", "python:dandizarr_server.gunicorn_config", "--bind", "0.0.0.0:8000", "--workers", "4", "--access-logfile", "-"]
