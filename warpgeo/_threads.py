"""The host threads warpgeo runs work on: one pool factory, the chunking of NumPy passes over threads, and
the locks those threads share (:class:`ForkSafeLock`).

A pool is made once per process id (a forked child, such as a DataLoader worker, inherits the parent's pool
objects but not their threads, so it gets pools of its own), optionally at the lowest scheduling priority
(the background table builds, which must not slow the caller's ops). A forked child also gets fresh locks:
one that a parent's thread held at the fork would never be released. Pure Python: no Warp, no torch ops."""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch


class ForkSafeLock:
    """A ``threading.Lock`` (an ``RLock`` if ``reentrant``) that a forked child gets afresh: a lock a parent's
    thread held at the fork (a thread the child does not have: a background build loading a module) would
    never be released there, and the child would wait on it forever. Used as a lock is (``with``,
    :meth:`acquire`, :meth:`release`)."""

    __slots__ = ("__weakref__", "_lock", "_reentrant")

    def __init__(self, reentrant: bool = False) -> None:
        self._reentrant = reentrant
        self._lock = self._fresh()
        _LOCKS.add(self)

    def _fresh(self) -> Any:
        return threading.RLock() if self._reentrant else threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self._lock.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._lock.__exit__(*exc)


#: Every :class:`ForkSafeLock` alive (a forked child replaces each one's lock, on its one thread).
_LOCKS: weakref.WeakSet[ForkSafeLock] = weakref.WeakSet()


def _fresh_locks() -> None:
    for lock in list(_LOCKS):
        lock._lock = lock._fresh()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_locks)


def pool(name: str, workers: int, *, low_priority: bool = False) -> ThreadPoolExecutor:
    """This process's pool ``name`` of ``workers`` threads (named ``name_0``, ...), made on first use and kept:
    one per process id, since a forked child (a DataLoader worker) inherits the parent's pool objects but not
    their threads, and would wait on them forever. ``low_priority``: its threads run at the lowest CPU
    priority (:func:`_yield_cores`), taking only the cores the caller's ops leave idle (background builds)."""
    return _pool(os.getpid(), name, workers, low_priority)


@functools.cache
def _pool(pid: int, name: str, workers: int, low_priority: bool) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(
        max_workers=workers, thread_name_prefix=name, initializer=_yield_cores if low_priority else None
    )


#: The NumPy steps of a table build run in chunks of at least this many faces, one a thread (below it the
#: per-call overheads of the vectorised passes outweigh a second thread).
_CHUNK_FACES = 1 << 15


def _thread_count() -> int:
    """Threads a table build uses at most: one a core, as many as torch's ops do."""
    return max(1, min(os.cpu_count() or 1, torch.get_num_threads()))


def _chunk_count(weights: list[int]) -> int:
    """How many chunks :func:`_in_chunks` makes of items weighing ``weights`` (faces)."""
    return max(1, min(_thread_count(), len(weights), sum(weights) // _CHUNK_FACES))


def _in_chunks(fn: Any, items: list, weights: list[int], *, background: bool) -> list:
    """``fn(items)`` (a list with one result per item, each item's result independent of the others in the
    list) computed in up to :func:`_chunk_count` runs of consecutive items of about equal weight, side by side
    on threads (NumPy releases the GIL in its passes): the same results as one call. ``background``: the
    threads run at the lowest priority (a :class:`Later` build)."""
    chunks = _chunk_count(weights)
    if chunks == 1:
        return fn(items)
    ends = np.searchsorted(np.cumsum(weights), np.arange(1, chunks) * (sum(weights) / chunks), side="left")
    bounds = [0, *sorted({int(e) + 1 for e in ends} - {0, len(items)}), len(items)]
    threads = pool("warpgeo-tables-chunk", chunks, low_priority=background)
    futures = [threads.submit(fn, items[a:b]) for a, b in itertools.pairwise(bounds)]
    out = []
    for future in futures:
        out.extend(future.result())
    return out


def core_to_spare() -> bool:
    """Whether a core is likely idle beside the calling thread: the 1-minute load average (the caller's own
    thread included) is at least one below the cores this process may run on. Where it is not (another
    program keeps the cores busy), a helper thread only takes time from the caller's thread and adds the
    wake-ups of its hand-over (``MeshWorld.add`` measured 1.19-1.30x the bare BVH build with a helper against
    1.16-1.25x without, at a load of 2 on 2 cores; 1.03x against 1.12x with a core free). True where the
    load average is unknown."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not a Unix
        return True
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return load + 1.0 <= cores


def _yield_cores() -> None:
    """Run the background builds at the lowest CPU priority (Linux: a thread's own nice value), so that they
    take the cores the caller's queries leave idle rather than slowing those queries down."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux, or not allowed: the default priority
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
