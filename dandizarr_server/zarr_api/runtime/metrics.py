"""The service's own Prometheus metrics (django-prometheus adds requests by view and status,
with latency histograms, and the database's): one definition each, incremented where the event
happens. Names are ``dandizarr_*``; docs/security.md and docs/deploying.md list them."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

BATCHES = Counter(
    "dandizarr_batches_total",
    "Upload and pack batches by what happened to them",
    ["kind", "event"],  # event: started, completed, cancelled
)
FILES_VERIFIED = Counter(
    "dandizarr_files_verified_total", "Files whose stored bytes matched their declared md5"
)
BYTES_VERIFIED = Counter("dandizarr_bytes_verified_total", "Bytes of the files verified")
ETAG_MISMATCHES = Counter(
    "dandizarr_etag_mismatches_total",
    "Files a completion found missing or with another md5 than declared",
)
TREE_UPDATE_LAG = Histogram(
    "dandizarr_tree_update_lag_seconds",
    "From a batch's completion to its changes being in the archive's checksum",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800),
)
STORAGE_ERRORS = Counter(
    "dandizarr_storage_errors_total", "Storage requests that failed, by error", ["kind"]
)
TASKS = Counter(
    "dandizarr_tasks_total", "Celery tasks run, by task and outcome", ["task", "outcome"]
)
TASK_SECONDS = Histogram(
    "dandizarr_task_duration_seconds",
    "How long Celery tasks ran, by task",
    ["task"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800),
)


def batch_started(kind: str) -> None:
    BATCHES.labels(kind, "started").inc()


def batch_completed(kind: str, verified_sizes: list[int]) -> None:
    BATCHES.labels(kind, "completed").inc()
    FILES_VERIFIED.inc(len(verified_sizes))
    BYTES_VERIFIED.inc(sum(verified_sizes))


def batch_cancelled(kind: str) -> None:
    BATCHES.labels(kind, "cancelled").inc()


def tree_update_lags(seconds: list[float]) -> None:
    for lag in seconds:
        TREE_UPDATE_LAG.observe(lag)
