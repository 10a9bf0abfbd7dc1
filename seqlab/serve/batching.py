"""Micro-batching: concurrent requests gathered for a few milliseconds, decoded together.

    request ─┐                    ┌─ one call run(key, [texts of every job]) ─┐
    request ─┼─ asyncio queue ──▶ │  in the single decode thread              ├─▶ split back
    request ─┘   (≤ wait_ms)      └───────────────────────────────────────────┘   per job

A job is ``(key, items)``: ``key`` holds the decode settings (beam, n-best, attention …)
and only jobs with equal keys share a call, so every text is decoded with exactly the
settings its request asked for. ``run`` is the task's own inference method (the same code
path as the CLI); translations do not depend on which sentences share a batch
(``seqlab.tasks.translation_eval``), so batching changes throughput, not answers.

One thread decodes, so PyTorch keeps all its intra-op threads for one batch at a time and
the event loop stays free to accept requests (tensor work releases the GIL).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

Runner = Callable[[Hashable, list[Any]], list[Any]]


class Overloaded(RuntimeError):
    """More requests are waiting than the server accepts (answered with a 503)."""


@dataclass
class _Job:
    key: Hashable
    items: list[Any]
    future: asyncio.Future = field(repr=False)


@dataclass
class BatchStats:
    """Counters for ``GET /info``: jobs (requests) and items (texts) decoded, in how many
    ``run`` calls, and the decode seconds spent."""

    jobs: int = 0
    items: int = 0
    calls: int = 0
    decode_s: float = 0.0

    def to_dict(self) -> dict[str, float]:
        mean = self.items / self.calls if self.calls else 0.0
        return {
            "requests": self.jobs,
            "texts": self.items,
            "decode_calls": self.calls,
            "mean_texts_per_call": round(mean, 3),
            "decode_seconds": round(self.decode_s, 3),
        }


class MicroBatcher:
    """Gather jobs for ``wait_ms`` (or until ``max_items`` items), group them by key, and
    call ``run(key, items)`` once per group in one worker thread.

    ``run`` must return one result per item, in order. Its exceptions reach every job of
    the call. Use inside a running event loop: ``await start()`` … ``await stop()``.
    """

    def __init__(
        self, run: Runner, wait_ms: float = 5.0, max_items: int = 64, max_pending: int = 256
    ) -> None:
        self.run = run
        self.wait_s = wait_ms / 1000.0
        self.max_items = max_items
        self.max_pending = max_pending
        self.stats = BatchStats()
        self._queue: asyncio.Queue[_Job] | None = None
        self._task: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._pending = 0

    async def start(self) -> None:
        self._queue = asyncio.Queue()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="seqlab-decode")
        self._task = asyncio.create_task(self._loop(), name="seqlab-microbatcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self._task = self._executor = self._queue = None

    async def submit(self, key: Hashable, items: list[Any]) -> list[Any]:
        """Decode ``items`` with settings ``key``; their results, in order."""
        if self._queue is None:
            raise RuntimeError("MicroBatcher.submit before start()")
        if self._pending >= self.max_pending:
            raise Overloaded(f"{self._pending} requests are already waiting")
        future = asyncio.get_running_loop().create_future()
        self._pending += 1
        try:
            await self._queue.put(_Job(key, list(items), future))
            return await future
        finally:
            self._pending -= 1

    async def _gather(self, first: _Job) -> list[_Job]:
        """``first`` and the jobs that arrive within ``wait_s`` (up to ``max_items``)."""
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        jobs, n = [first], len(first.items)
        deadline = loop.time() + self.wait_s
        while n < self.max_items:
            try:
                job = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    job = await asyncio.wait_for(self._queue.get(), remaining)
                except asyncio.TimeoutError:  # (not the builtin on Python 3.10)
                    break
            jobs.append(job)
            n += len(job.items)
        return jobs

    async def _loop(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            jobs = await self._gather(await self._queue.get())
            groups: dict[Hashable, list[_Job]] = {}
            for job in jobs:
                if not job.future.done():  # a request that timed out is not decoded
                    groups.setdefault(job.key, []).append(job)
            for key, group in groups.items():
                items = [item for job in group for item in job.items]
                start = time.perf_counter()
                try:
                    results = await loop.run_in_executor(self._executor, self.run, key, items)
                    if len(results) != len(items):
                        raise RuntimeError(f"run gave {len(results)} results for {len(items)}")
                except Exception as exc:  # delivered to the requests, which answer it
                    for job in group:
                        if not job.future.done():
                            job.future.set_exception(exc)
                    continue
                finally:
                    self.stats.calls += 1
                    self.stats.decode_s += time.perf_counter() - start
                offset = 0
                for job in group:
                    part = results[offset : offset + len(job.items)]
                    offset += len(job.items)
                    self.stats.jobs += 1
                    self.stats.items += len(part)
                    if not job.future.done():
                        job.future.set_result(part)
