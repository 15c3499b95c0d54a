"""Django settings, all from the environment (12-factor).

The defaults run the whole service on one machine with no other server: SQLite and a
local-filesystem object store under ``DANDIZARR_DATA_DIR``, Celery tasks run inline.
Production sets ``DATABASE_URL`` (PostgreSQL), ``CELERY_BROKER_URL`` (Redis) and
``DANDIZARR_STORAGE=s3`` with the S3 variables.
"""

from __future__ import annotations

import ipaddress
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
import django_stubs_ext

from dandizarr import __version__
from dandizarr_server.embedded import EMBEDDED_VARIABLE, SECRET_KEY_VARIABLE, secret_key
from dandizarr_server.environment import (
    env,
    env_bool,
    env_int,
    env_list,
    env_str,
)
from dandizarr_server.logging_config import structured_logging
from dandizarr_server.page_security import PAGES_CONTENT_SECURITY_POLICY
from dandizarr_server.periodic_tasks import beat_schedule

# Lets admin.ModelAdmin[Model] and friends be subscripted at run time, as the type stubs do.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent

# By default var/ of the checkout (make serve's); installed from a wheel, BASE_DIR is
# site-packages, so var/ of the directory the service starts in instead.
_DEFAULT_DATA_DIR = BASE_DIR / "var" if (BASE_DIR / "manage.py").is_file() else Path.cwd() / "var"
DATA_DIR = Path(env_str("DANDIZARR_DATA_DIR", str(_DEFAULT_DATA_DIR))).resolve()

DEBUG = env_bool("DANDIZARR_DEBUG", False)
# Never a constant (dandizarr_server/embedded.py): the environment's, `dandizarr serve`'s own
# kept in the data directory, or else one of this process alone (which wsgi and Celery refuse).
EMBEDDED = env_bool(EMBEDDED_VARIABLE, False)
SECRET_KEY, SECRET_KEY_SOURCE = secret_key(env(SECRET_KEY_VARIABLE), EMBEDDED, DATA_DIR)

HOST = env_str("DANDIZARR_HOST", "127.0.0.1")
PORT = env_int("DANDIZARR_PORT", 8000)
# Where `dandizarr serve` writes its access log ("-": standard output); each line ends with the
# request's time in microseconds (the benchmarks sum them).
ACCESS_LOG = env_str("DANDIZARR_ACCESS_LOG", "-")
# Slow clients (dandizarr_server/gunicorn_worker.py): a request head must arrive within this time; a
# body read may wait this long, and a body must average the rate; open connections per web
# worker process.
HEADER_TIMEOUT_SECONDS = env_int("DANDIZARR_HEADER_TIMEOUT_SECONDS", 10)
BODY_TIMEOUT_SECONDS = env_int("DANDIZARR_BODY_TIMEOUT_SECONDS", 30)
BODY_MIN_BYTES_PER_SECOND = env_int("DANDIZARR_BODY_MIN_BYTES_PER_SECOND", 1024)
MAX_CONNECTIONS = env_int("DANDIZARR_MAX_CONNECTIONS", 1000)
# The address clients use to reach this service; the local storage backend's presigned URLs
# point here.
PUBLIC_URL = env_str("DANDIZARR_PUBLIC_URL", f"http://{HOST}:{PORT}").rstrip("/")
# By default the host the service binds and its public URL's host (with the loopback names
# when it binds a loopback address): never "*".
_LOOPBACK = ["127.0.0.1", "localhost", "[::1]", "::1"]
_DEFAULT_HOSTS = {HOST, urlsplit(PUBLIC_URL).hostname or HOST} - {"0.0.0.0", "::", ""}
if HOST in _LOOPBACK:
    _DEFAULT_HOSTS.update(_LOOPBACK)
# Optional: a separate origin for user bytes (like GitHub's raw host), e.g.
# https://usercontent.example.org, routed to this service. Storage URLs of the local backend
# then point there, and that host serves nothing but them (dandizarr_server.user_content_host).
# Unset, user bytes come from the service's own origin, made inert by their headers.
USER_CONTENT_URL = (env("DANDIZARR_USER_CONTENT_URL") or "").rstrip("/")
USER_CONTENT_HOST = urlsplit(USER_CONTENT_URL).hostname or ""
if USER_CONTENT_HOST:
    _DEFAULT_HOSTS.add(USER_CONTENT_HOST)
ALLOWED_HOSTS = env_list("DANDIZARR_ALLOWED_HOSTS", ",".join(sorted(_DEFAULT_HOSTS)))
CSRF_TRUSTED_ORIGINS = env_list(
    "DANDIZARR_CSRF_TRUSTED_ORIGINS", f"{PUBLIC_URL},http://127.0.0.1,http://localhost"
)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "dandizarr_server.apps.DandizarrConfig",
    "drf_spectacular_sidecar",
    "csp",
    "axes",
    "django_prometheus",
    "django_structlog",
    "dandizarr_server.zarr_api",
]

MIDDLEWARE = [
    # A host not in ALLOWED_HOSTS: a plain 400 before anything reads the host and logs a
    # traceback for it.
    "dandizarr_server.zarr_api.edge.hosts.UnknownHostMiddleware",
    # Requests by view and status, with latencies (django-prometheus): first and last.
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files, found in the installed apps (no collectstatic step): gunicorn under compose
    # serves the admin's, the pages' and Swagger UI's files as `dandizarr serve` does.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "dandizarr_server.zarr_api.edge.authentication.TokenUserMiddleware",
    # One id per request in every log event, returned as X-Request-ID (see request_ids.py).
    "dandizarr_server.request_ids.RequestIdMiddleware",
    "django_structlog.middlewares.RequestMiddleware",
    "dandizarr_server.request_ids.RequestIdHeaderMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes asks: counts failed logins, answers 429 while one is locked out.
    "axes.middleware.AxesMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]
if USER_CONTENT_HOST:
    MIDDLEWARE.insert(1, "dandizarr_server.user_content_host.UserContentHostMiddleware")

# --- Metrics (/metrics, Prometheus) -----------------------------------------------------------
# Readable from these networks, or with `Authorization: Bearer <DANDIZARR_METRICS_TOKEN>`;
# anyone else gets a 404. Several gunicorn workers: set PROMETHEUS_MULTIPROC_DIR.
DANDIZARR_METRICS_NETWORKS = [
    ipaddress.ip_network(n) for n in env_list("DANDIZARR_METRICS_NETWORKS", "127.0.0.0/8,::1/128")
]
DANDIZARR_METRICS_TOKEN = env("DANDIZARR_METRICS_TOKEN")
# Where the processes of one web service (gunicorn's workers) or one Celery worker (its pool)
# keep their metrics, so one scrape sees them all (prometheus-client's multiprocess mode, which
# reads this variable itself; an empty directory made at start).
PROMETHEUS_MULTIPROC_DIR = env("PROMETHEUS_MULTIPROC_DIR")
# A Celery worker serves its own metrics on this port (0: none; dandizarr_server.task_metrics),
# at this address: loopback, as nothing stands in front of it to decide who may read; widen it
# (0.0.0.0) where only a private network reaches the worker, as under compose.
DANDIZARR_WORKER_METRICS_PORT = env_int("DANDIZARR_WORKER_METRICS_PORT", 0)
DANDIZARR_WORKER_METRICS_ADDRESS = env_str("DANDIZARR_WORKER_METRICS_ADDRESS", "127.0.0.1")

# --- Login attempts (django-axes) -------------------------------------------------------------
# /admin/login/: after DANDIZARR_LOGIN_FAILURE_LIMIT failures for one account from one address,
# that account is locked out from that address for DANDIZARR_LOGIN_COOLOFF_MINUTES (429). The
# pair, never the account alone (a stranger's five guesses would lock its owner out from
# everywhere) nor the address alone (everyone behind one NAT). The address is the one every
# per-address limit counts (dandizarr_server.client_address).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("DANDIZARR_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("DANDIZARR_LOGIN_COOLOFF_MINUTES", 15))
# A list inside the list is a combination (django-axes 8): both must match to count or lock.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "dandizarr_server.client_address.client_address"
# API tokens that do not exist are limited per address too (DANDIZARR_TOKEN_FAILURE_RATE, in
# REST_FRAMEWORK's throttle rates: dandizarr_server.zarr_api.edge.authentication).

# --- Browser security ------------------------------------------------------------------------
# The pages' policy (dandizarr_server.page_security); responses that carry user bytes set their
# own, stricter one (dandizarr.objectstore.user_bytes), which the middleware leaves alone.
CONTENT_SECURITY_POLICY = PAGES_CONTENT_SECURITY_POLICY
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
# Served over HTTPS (the public URL says so): cookies only over TLS, and browsers told to
# come back over TLS only. Behind a TLS proxy, DANDIZARR_TLS_PROXY=1 trusts its
# X-Forwarded-Proto and the last X-Forwarded-For entry (dandizarr_server.client_address); only
# then: a client could send those headers itself.
HTTPS = PUBLIC_URL.startswith("https://")
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = env_int("DANDIZARR_HSTS_SECONDS", 31536000 if HTTPS else 0)
DANDIZARR_TLS_PROXY = env_bool("DANDIZARR_TLS_PROXY", False)
if DANDIZARR_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

ROOT_URLCONF = "dandizarr_server.urls"
WSGI_APPLICATION = "dandizarr_server.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{DATA_DIR / 'db.sqlite3'}"),
        conn_max_age=env_int("DANDIZARR_DB_CONN_MAX_AGE", 60),
        # A persistent connection is checked before each request or task reuses it, so one the
        # server dropped (a restart, a terminated backend) is replaced instead of failing a request.
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # SQLite has no row locks (select_for_update does nothing): IMMEDIATE transactions take
    # the database's write lock when they begin, so every transaction that reads and then
    # writes runs alone, and a second writer waits (up to the timeout) instead of failing
    # with "database is locked" half-way. WAL lets reads go on meanwhile.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        transaction_mode="IMMEDIATE", timeout=30, init_command="PRAGMA journal_mode=WAL;"
    )
    # The same, with the write lock handed from one transaction of this process to the next
    # instead of polled for (dandizarr_server/sqlite/base.py).
    DATABASES["default"]["ENGINE"] = "dandizarr_server.sqlite"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
WHITENOISE_USE_FINDERS = True
# Upload bodies for the local backend's presigned PUT endpoint are streamed, not buffered.
DATA_UPLOAD_MAX_MEMORY_SIZE = 32 * 1024 * 1024

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticatedOrReadOnly"],
    # DRF's browsable API without the inline style the pages' CSP blocks.
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "dandizarr_server.zarr_api.edge.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "dandizarr_server.zarr_api.edge.exceptions.exception_handler",
    "DEFAULT_PARSER_CLASSES": [
        "dandizarr_server.zarr_api.parsers.json_body.SafeJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    # ASCII JSON (non-ASCII as \\uXXXX): an error that echoes a path with a lone surrogate
    # must still encode, and JSON parsers read it back as the same string.
    "UNICODE_JSON": False,
    # Rate limits (dandizarr_server.zarr_api.edge.throttles): expensive reads per address and per
    # account, invalid tokens per address, publishes per account, client downloads per address.
    "DEFAULT_THROTTLE_RATES": {
        "expensive_anon": env_str("DANDIZARR_THROTTLE_ANON", "300/min"),
        "expensive_user": env_str("DANDIZARR_THROTTLE_USER", "1200/min"),
        "token_failures": env_str("DANDIZARR_TOKEN_FAILURE_RATE", "30/min"),
        # Per account: each publish makes a version of every archive in the draft, history
        # nothing removes (a million-file archive's costs the database up to 30 s).
        "publishes": env_str("DANDIZARR_THROTTLE_PUBLISHES", "30/hour"),
        # Per address: the client wheel's downloads (a few hundred kilobytes each).
        "client_downloads": env_str("DANDIZARR_THROTTLE_CLIENT_DOWNLOADS", "60/hour"),
    },
}

SPECTACULAR_SETTINGS = {
    "TITLE": "dandizarr",
    "DESCRIPTION": "Zarr archives in object storage with a verifiable tree hash.",
    "VERSION": __version__,
    # Swagger UI and Redoc from the installed drf-spectacular-sidecar, not from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}
# The version /api/info/ reports (the app does not import the client package for it).
DANDIZARR_VERSION = __version__

# Django's cache: the expensive reads' rate counts (zarr_api.edge.throttles), cached
# previews. One process's memory by default (`dandizarr serve` is one process); several web
# workers share counts only through a shared cache: DANDIZARR_CACHE_URL=redis://host:6379/1.
_CACHE_URL = env("DANDIZARR_CACHE_URL")
if _CACHE_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": _CACHE_URL,
        }
    }
# A version's documents (listing pages, manifests) are made once and kept in that cache up to
# this many bytes each (zarr_api.runtime.kept_documents); longer ones are made per request.
DANDIZARR_KEPT_DOCUMENT_BYTES = env_int("DANDIZARR_KEPT_DOCUMENT_BYTES", 4 << 20)

# --- Object storage --------------------------------------------------------------------------
DANDIZARR_STORAGE = env_str("DANDIZARR_STORAGE", "local")
if DANDIZARR_STORAGE not in {"local", "s3"}:
    raise ValueError(f"DANDIZARR_STORAGE must be 'local' or 's3', got {DANDIZARR_STORAGE!r}")
DANDIZARR_LOCAL_STORAGE_DIR = Path(
    env_str("DANDIZARR_LOCAL_STORAGE_DIR", str(DATA_DIR / "storage"))
).resolve()
DANDIZARR_S3_BUCKET = env_str("DANDIZARR_S3_BUCKET", "dandiarchive")
DANDIZARR_S3_REGION = env_str("DANDIZARR_S3_REGION", "us-east-1")
DANDIZARR_S3_ENDPOINT_URL = env("DANDIZARR_S3_ENDPOINT_URL")
# Presigned URLs are signed for this endpoint when the service reaches S3 at an address
# clients cannot (e.g. http://s3:8333 inside docker-compose).
DANDIZARR_S3_PRESIGN_ENDPOINT_URL = env("DANDIZARR_S3_PRESIGN_ENDPOINT_URL")
# A public bucket's URL: manifests then give plain object URLs that never expire.
DANDIZARR_S3_PUBLIC_READ_URL = env("DANDIZARR_S3_PUBLIC_READ_URL")
DANDIZARR_S3_ACCESS_KEY_ID = env("AWS_ACCESS_KEY_ID")
DANDIZARR_S3_SECRET_ACCESS_KEY = env("AWS_SECRET_ACCESS_KEY")
DANDIZARR_S3_MAX_POOL_CONNECTIONS = env_int("DANDIZARR_S3_MAX_POOL_CONNECTIONS", 64)
# Retries of a failed S3 request after its first try (botocore's standard mode, with backoff).
DANDIZARR_S3_RETRIES = env_int("DANDIZARR_S3_RETRIES", 5)
# Upload URLs cannot be revoked on S3: a batch's keys are reconciled with storage, and its
# archive may be published, only once they have expired (plus the margin: uploads in flight,
# clock skew). Long enough for one batch's PUTs, no longer.
DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS = env_int("DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS", 600)
DANDIZARR_RECONCILE_MARGIN_SECONDS = env_int("DANDIZARR_RECONCILE_MARGIN_SECONDS", 300)
# Private read links (docs/embargo.md): the longest life one may be given, and how many one
# archive may have alive at once.
DANDIZARR_READ_LINK_MAX_SECONDS = env_int("DANDIZARR_READ_LINK_MAX_SECONDS", 7 * 86400)
DANDIZARR_READ_LINK_LIMIT = env_int("DANDIZARR_READ_LINK_LIMIT", 20)

# --- Archive rules ---------------------------------------------------------------------------
DANDIZARR_BATCH_LIMIT = env_int("DANDIZARR_BATCH_LIMIT", 500)
# Concurrent storage requests when verifying or deleting a batch.
DANDIZARR_STORAGE_CONCURRENCY = env_int("DANDIZARR_STORAGE_CONCURRENCY", 32)
# An open batch older than this is cancelled by the periodic sweep (its URLs expired long ago).
DANDIZARR_STALE_BATCH_SECONDS = env_int("DANDIZARR_STALE_BATCH_SECONDS", 24 * 3600)
# How often beat runs that sweep.
DANDIZARR_STALE_SWEEP_INTERVAL_SECONDS = env_int("DANDIZARR_STALE_SWEEP_INTERVAL_SECONDS", 3600)
# A batch pending longer than this has lost its tree-update task (a broker restart emptied the
# queue, a worker died); beat requeues such updates every DANDIZARR_RESUME_INTERVAL_SECONDS.
DANDIZARR_STALLED_UPDATE_SECONDS = env_int("DANDIZARR_STALLED_UPDATE_SECONDS", 60)
DANDIZARR_RESUME_INTERVAL_SECONDS = env_int("DANDIZARR_RESUME_INTERVAL_SECONDS", 60)
# How often ended batches whose upload URLs have expired are reconciled with storage (S3).
DANDIZARR_RECONCILE_SWEEP_SECONDS = env_int("DANDIZARR_RECONCILE_SWEEP_SECONDS", 120)
# Sharded archives (docs/sharded.md): members per pack batch; uncompressed bytes a shard made by
# POST pack/ aims at; dead share of a shard (deleted or overwritten members) that triggers its
# compaction.
DANDIZARR_PACK_MEMBER_LIMIT = env_int("DANDIZARR_PACK_MEMBER_LIMIT", 100_000)
DANDIZARR_SHARD_TARGET_BYTES = env_int("DANDIZARR_SHARD_TARGET_BYTES", 64 << 20)
DANDIZARR_SHARD_COMPACT_PERCENT = env_int("DANDIZARR_SHARD_COMPACT_PERCENT", 50)
# Decoded .checksum listings kept per process for browsing and batch starts, in bytes of memory
# (estimated, runtime/tree.listing_bytes): 32 MiB holds a directory of 100,000 files (~25 MB),
# about 135,000 entries of a packed archive's chunk directories.
DANDIZARR_LISTING_CACHE_BYTES = env_int("DANDIZARR_LISTING_CACHE_BYTES", 32 << 20)

# Previews (archive pages): render threads, renders waiting beyond them (then 503), how long
# one waits for a render thread (then 503), and the time one render may read for.
DANDIZARR_PREVIEW_WORKERS = env_int("DANDIZARR_PREVIEW_WORKERS", 2)
DANDIZARR_PREVIEW_QUEUE = env_int("DANDIZARR_PREVIEW_QUEUE", 4)
DANDIZARR_PREVIEW_WAIT_SECONDS = env_int("DANDIZARR_PREVIEW_WAIT_SECONDS", 10)
DANDIZARR_PREVIEW_SECONDS = env_int("DANDIZARR_PREVIEW_SECONDS", 5)

# Tests only: kill the process at this named step, or with "raise:" before the name make it
# fail with a costly exception (zarr_api.runtime.crash.crash_point).
DANDIZARR_CRASH_AT = env("DANDIZARR_CRASH_AT")

# --- The real dandi CLI (docs/api.md, "DANDI clients") ---------------------------------------
# The DANDI schema version /api/info/ advertises: the newest dandi accepts its own or an older
# one of the same minor version (dandischema 0.14: 0.8.0); dandi 0.48.1 wants exactly 0.6.3.
DANDIZARR_DANDI_SCHEMA_VERSION = env_str("DANDIZARR_DANDI_SCHEMA_VERSION", "0.8.0")
DANDIZARR_DANDI_CLI_MINIMAL_VERSION = env_str("DANDIZARR_DANDI_CLI_MINIMAL_VERSION", "0.48.1")
# Files one upload batch may gather, request by request (POST upload/add/, or DANDI's POST
# files/), before it is completed (per request: the batch limit).
DANDIZARR_OPEN_BATCH_FILE_LIMIT = env_int("DANDIZARR_OPEN_BATCH_FILE_LIMIT", 100_000)
# Files declared bigger than this (with their size and parts' md5s) are uploaded in parts, on
# S3 (docs/api.md, "Big files"; the default's reasons in docs/measurements.md). It must stay
# under S3's single-PUT limit of 5 GiB; the local backend takes any file in one PUT.
DANDIZARR_MULTIPART_THRESHOLD_BYTES = env_int("DANDIZARR_MULTIPART_THRESHOLD_BYTES", 1 << 30)
# The smallest part (S3's minimum, 5 MiB, is the floor); bigger files get bigger parts so that
# no upload has more than S3's 10,000 (dandizarr.objectstore.multipart.part_size).
DANDIZARR_MULTIPART_PART_BYTES = env_int("DANDIZARR_MULTIPART_PART_BYTES", 64 << 20)
if not 0 < DANDIZARR_MULTIPART_THRESHOLD_BYTES <= 5 << 30:
    raise ValueError("DANDIZARR_MULTIPART_THRESHOLD_BYTES must be between 1 and 5 GiB (S3's PUT)")
# Part URLs of a big file one answer holds: a start (or add) gives each file at most this many,
# and at most ten pages in all; POST batches/{id}/parts/ gives the next (docs/api.md, "Big
# files"). No answer grows with the sizes a client declares.
DANDIZARR_PART_URLS_PAGE = env_int("DANDIZARR_PART_URLS_PAGE", 100)
if DANDIZARR_PART_URLS_PAGE < 1:
    raise ValueError("DANDIZARR_PART_URLS_PAGE must be at least 1")
# What files sent in parts may declare: one batch (bytes, parts), and the open batches of one
# account together (bytes). A batch of 10 TiB at the default part size has 163,840 parts.
DANDIZARR_BATCH_DECLARED_BYTES_LIMIT = env_int("DANDIZARR_BATCH_DECLARED_BYTES_LIMIT", 10 << 40)
DANDIZARR_BATCH_DECLARED_PARTS_LIMIT = env_int("DANDIZARR_BATCH_DECLARED_PARTS_LIMIT", 200_000)
DANDIZARR_ACCOUNT_DECLARED_BYTES_LIMIT = env_int("DANDIZARR_ACCOUNT_DECLARED_BYTES_LIMIT", 20 << 40)
# Write sessions (docs/writing.md): an open session with no write for this long has lost its
# writer and is ended by the sweep (its staged objects deleted), which runs this often; the
# paths (files and deletions) one session may change.
DANDIZARR_WRITE_SESSION_TTL_SECONDS = env_int("DANDIZARR_WRITE_SESSION_TTL_SECONDS", 24 * 3600)
DANDIZARR_WRITE_SESSION_SWEEP_SECONDS = env_int("DANDIZARR_WRITE_SESSION_SWEEP_SECONDS", 300)
DANDIZARR_WRITE_SESSION_FILE_LIMIT = env_int("DANDIZARR_WRITE_SESSION_FILE_LIMIT", 1_000_000)
# Bytes one session may stage (its files, and its big files as declared when begun).
DANDIZARR_WRITE_SESSION_BYTE_LIMIT = env_int("DANDIZARR_WRITE_SESSION_BYTE_LIMIT", 10 << 40)

# --- Celery ----------------------------------------------------------------------------------
CELERY_BROKER_URL = env("CELERY_BROKER_URL")
# Without a broker the tasks run inline, in the request: the embedded single-machine default.
CELERY_TASK_ALWAYS_EAGER = CELERY_BROKER_URL is None
CELERY_TASK_EAGER_PROPAGATES = True
# Without a broker, ``dandizarr serve`` runs tasks in a background thread of its process
# (zarr_api.runtime.background) instead of inline in the request that scheduled them.
DANDIZARR_TASKS_IN_BACKGROUND = CELERY_TASK_ALWAYS_EAGER and env_bool(
    "DANDIZARR_TASKS_IN_BACKGROUND", False
)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = env_str("DANDIZARR_CELERY_QUEUE", "dandizarr")
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
# A message whose worker died is redelivered after this long; tasks are idempotent, so an early
# redelivery of a slow task is harmless.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("DANDIZARR_CELERY_VISIBILITY_TIMEOUT", 300),
}
# Storage garbage collection (docs/versions.md): how long an unreferenced object is kept (the
# undelete window), and how often the collection runs.
DANDIZARR_GC_WINDOW_DAYS = env_int("DANDIZARR_GC_WINDOW_DAYS", 30)
DANDIZARR_GC_INTERVAL_SECONDS = env_int("DANDIZARR_GC_INTERVAL_SECONDS", 24 * 3600)
CELERY_BEAT_SCHEDULE = beat_schedule(
    stale_sweep_seconds=DANDIZARR_STALE_SWEEP_INTERVAL_SECONDS,
    resume_seconds=DANDIZARR_RESUME_INTERVAL_SECONDS,
    reconcile_seconds=DANDIZARR_RECONCILE_SWEEP_SECONDS,
    garbage_seconds=DANDIZARR_GC_INTERVAL_SECONDS,
    session_sweep_seconds=DANDIZARR_WRITE_SESSION_SWEEP_SECONDS,
)

# --- Logs --------------------------------------------------------------------------------------
# One event per request and per task (django-structlog), as JSON lines in production; `dandizarr
# serve` (and DANDIZARR_LOG_FORMAT=console) keeps them readable. Every event carries the
# request's id, in the tasks it scheduled too (DJANGO_STRUCTLOG_CELERY_ENABLED).
LOG_FORMAT = env_str("DANDIZARR_LOG_FORMAT", "console" if EMBEDDED else "json")
if LOG_FORMAT not in {"json", "console"}:
    raise ValueError(f"DANDIZARR_LOG_FORMAT must be 'json' or 'console', got {LOG_FORMAT!r}")
DJANGO_STRUCTLOG_CELERY_ENABLED = True
DJANGO_STRUCTLOG_TRUST_UPSTREAM_REQUEST_ID = True
LOGGING = structured_logging(LOG_FORMAT, env_str("DANDIZARR_LOG_LEVEL", "INFO"))
# Celery workers log through the configuration above, not a handler of their own.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
