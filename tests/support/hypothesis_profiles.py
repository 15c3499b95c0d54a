"""Hypothesis' example counts, in one place: the ``dev`` profile (the default: the inner loop and
``make test``) and ``ci`` (under CI=true, or HYPOTHESIS_PROFILE=ci), loaded by tests/conftest.py.

A property test takes its count from the profile. A test whose every example is costly (a
stateful machine of uploads, the schema fuzzer) states what it runs under ``ci`` with
``examples(n)``, and runs that share of it under ``dev``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

from tests.support.ci import IN_CI

CI_EXAMPLES = 150
DEV_EXAMPLES = 40

# No deadline: on two shared cores one example's time says nothing about the code.
settings.register_profile(
    "ci",
    max_examples=CI_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    max_examples=DEV_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def load_profile() -> str:
    name = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if IN_CI else "dev")
    settings.load_profile(name)
    return name


def examples(under_ci: int) -> int:
    """``under_ci`` examples under the ``ci`` profile, the same share of the loaded profile's
    count under another (at least one)."""
    return max(1, round(under_ci * settings.default.max_examples / CI_EXAMPLES))


def fuzz_examples(in_test: int) -> int:
    """A fuzzer's example count: FUZZ_EXAMPLES when set (``make fuzz``'s long run), else
    ``in_test`` under every profile (the metadata fuzzers run a few thousand cheap examples in
    ``make test``: tests/sharding/test_metadata_fuzz.py, tests/zarr_api/test_describe_fuzz.py)."""
    return int(os.environ.get("FUZZ_EXAMPLES") or in_test)
