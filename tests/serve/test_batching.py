"""The micro-batcher alone: jobs queued together become one call per decode setting,
results go back to their own job in order, a failing call fails only its jobs, a full
queue refuses, and a job whose request gave up is not decoded."""

from __future__ import annotations

import asyncio

import pytest

from seqlab.serve.batching import MicroBatcher, Overloaded


class Recorder:
    """A ``run`` that records its calls: item → f"{key}:{item}"; key "boom" raises."""

    def __init__(self):
        self.calls = []

    def __call__(self, key, items):
        self.calls.append((key, list(items)))
        if key == "boom":
            raise ValueError("boom")
        return [f"{key}:{x}" for x in items]


def _run(coro):
    return asyncio.run(coro)


def test_jobs_arriving_together_share_one_call_per_key():
    run = Recorder()

    async def go():
        b = MicroBatcher(run, wait_ms=10_000, max_items=5)
        await b.start()
        jobs = [("a", [1, 2]), ("b", [3]), ("a", [4]), ("a", [5])]  # five items: no waiting
        out = await asyncio.gather(*(b.submit(k, items) for k, items in jobs))
        await b.stop()
        return out, b.stats.to_dict()

    out, stats = _run(go())
    assert out == [["a:1", "a:2"], ["b:3"], ["a:4"], ["a:5"]]
    assert run.calls == [("a", [1, 2, 4, 5]), ("b", [3])]
    assert stats["requests"] == 4 and stats["texts"] == 5 and stats["decode_calls"] == 2


def test_max_items_splits_batches_and_zero_wait_runs_each_job_alone():
    run = Recorder()

    async def go(wait_ms, max_items):
        b = MicroBatcher(run, wait_ms=wait_ms, max_items=max_items)
        await b.start()
        out = await asyncio.gather(*(b.submit("k", [i]) for i in range(4)))
        await b.stop()
        return out

    assert _run(go(10_000, 2)) == [["k:0"], ["k:1"], ["k:2"], ["k:3"]]
    assert [items for _, items in run.calls] == [[0, 1], [2, 3]]
    run.calls.clear()
    _run(go(0, 64))
    assert len(run.calls) >= 1 and sorted(x for _, i in run.calls for x in i) == [0, 1, 2, 3]


def test_a_failing_call_fails_only_its_own_jobs():
    run = Recorder()

    async def go():
        b = MicroBatcher(run, wait_ms=10_000, max_items=3)
        await b.start()
        out = await asyncio.gather(
            b.submit("boom", [1]), b.submit("ok", [2]), b.submit("boom", [3]),
            return_exceptions=True,
        )  # fmt: skip
        await b.stop()
        return out

    bad1, good, bad2 = _run(go())
    assert isinstance(bad1, ValueError) and isinstance(bad2, ValueError) and good == ["ok:2"]


def test_full_queue_is_refused_and_abandoned_jobs_are_not_run():
    run = Recorder()

    async def go():
        b = MicroBatcher(run, wait_ms=10_000, max_items=3, max_pending=2)
        await b.start()
        first = asyncio.ensure_future(b.submit("k", [1]))
        second = asyncio.ensure_future(b.submit("gone", [2]))
        await asyncio.sleep(0)  # both are queued now
        with pytest.raises(Overloaded):
            await b.submit("k", [3])
        second.cancel()  # its request timed out
        third = asyncio.ensure_future(b.submit("k", [4]))  # the third item ends the gathering
        out = await asyncio.gather(first, third)
        await b.stop()
        return out

    assert _run(go()) == [["k:1"], ["k:4"]]
    assert run.calls == [("k", [1, 4])]  # "gone" was never decoded
