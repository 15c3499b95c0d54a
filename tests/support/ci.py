"""The one rule for what a test may skip: here, a test whose tool or service this machine lacks
is skipped with the reason; in CI (``CI=true``, which .ci/run's machine sets and which installs
everything), the same lack is a failure, so nothing CI should prove is silently left out."""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def skip_here_fail_in_ci(reason: str) -> None:
    """Skip the running test with ``reason``; in CI, fail it with that reason instead."""
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


def needs(missing: object, reason: str) -> pytest.MarkDecorator:
    """A mark: skip where ``missing`` is truthy, except in CI, where the test runs (and fails
    for want of it)."""
    return pytest.mark.skipif(bool(missing) and not IN_CI, reason=reason)
