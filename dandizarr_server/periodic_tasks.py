"""The periodic sweeps Celery beat runs: each finishes what a lost task, an expired upload URL
or a crash left undone, so no state waits for a person."""

from __future__ import annotations

from typing import Any


def beat_schedule(
    *,
    stale_sweep_seconds: int,
    resume_seconds: int,
    reconcile_seconds: int,
    garbage_seconds: int,
    session_sweep_seconds: int = 300,
) -> dict[str, dict[str, Any]]:
    return {
        "cancel-stale-batches": {
            "task": "dandizarr_server.zarr_api.tasks.cancel_stale_batches",
            "schedule": float(stale_sweep_seconds),
        },
        "resume-stalled-tree-updates": {
            "task": "dandizarr_server.zarr_api.tasks.resume_stalled_tree_updates",
            "schedule": float(resume_seconds),
        },
        "finish-batch-ends": {
            "task": "dandizarr_server.zarr_api.tasks.finish_batch_ends",
            "schedule": 60.0,
        },
        "finish-unembargoes": {
            "task": "dandizarr_server.zarr_api.tasks.finish_unembargoes",
            "schedule": 60.0,
        },
        "reconcile-due-batches": {
            "task": "dandizarr_server.zarr_api.tasks.reconcile_due_batches",
            "schedule": float(reconcile_seconds),
        },
        "collect-storage-garbage": {
            "task": "dandizarr_server.zarr_api.tasks.collect_storage_garbage",
            "schedule": float(garbage_seconds),
        },
        "sweep-write-sessions": {
            "task": "dandizarr_server.zarr_api.tasks.sweep_write_sessions",
            "schedule": float(session_sweep_seconds),
        },
    }
