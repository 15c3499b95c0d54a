"""``ordered_map``: results in order, a bounded look-ahead, errors where taken, cancelling."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from dandizarr.concurrency import ordered_map


def test_results_in_order_with_at_most_ahead_items_submitted_beyond_the_one_taken() -> None:
    submitted: list[int] = []
    lock = threading.Lock()

    def square(x: int) -> int:
        with lock:
            submitted.append(x)
        return x * x

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = ordered_map(pool, square, iter(range(100)), ahead=4)
        taken = [next(results) for _ in range(10)]
        # Taking the tenth result needed items 0..12 submitted, and nothing beyond.
        assert taken == [x * x for x in range(10)]
        pool.submit(lambda: None).result()  # the pool drained what it was given
        assert sorted(submitted) == list(range(13))
        assert list(results) == [x * x for x in range(10, 100)]


def test_an_error_is_raised_where_its_result_is_taken_and_the_rest_is_cancelled() -> None:
    started: list[int] = []
    gate = threading.Event()

    def work(x: int) -> int:
        started.append(x)
        if x == 2:
            raise ValueError("item 2")
        if x > 2:
            gate.wait(5)
        return x

    with ThreadPoolExecutor(max_workers=1) as pool:
        results = ordered_map(pool, work, range(50), ahead=8)
        assert [next(results), next(results)] == [0, 1]
        with pytest.raises(ValueError, match="item 2"):
            next(results)
        gate.set()
    # One worker: item 3 may have started before the error was taken; the rest never ran.
    assert max(started) <= 3


def test_closing_early_cancels_what_is_queued() -> None:
    ran: list[int] = []
    gate = threading.Event()

    def work(x: int) -> int:
        gate.wait(5)
        ran.append(x)
        return x

    with ThreadPoolExecutor(max_workers=1) as pool:
        results = ordered_map(pool, work, range(1000), ahead=10)
        gate.set()
        assert next(results) == 0
        results.close()
    assert len(ran) <= 11  # the one running, never the 1000
