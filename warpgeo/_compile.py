"""A process's first CPU compile: the module without Warp's precompiled header, the header built beside it.

Warp compiles each CPU module with its in-process Clang. Every module includes Warp's native headers
(``builtin.h`` and all it pulls in); parsing them is ~2 s of a module's compile. Warp therefore keeps a
precompiled header (PCH) per process and thread, and builds it at the first compile that asks for it: that
first compile costs ~1.3 s more than one without the header, every later one ~2 s less.

When warpgeo loads one of its own modules (:func:`loading`) and that compile would have to build the
header first, it instead:

* compiles the module without the header, on the calling thread, and
* builds the header on a thread of its own, on another core (a compile of an empty source with the header
  on: Warp builds it there, in the same folder and under the same name as it would have).

The first op of a process returns as soon as its own module is built (about 1.3 s sooner on a machine with
two cores), and later compiles of the process wait for the header and use it, as before. Nothing else
changes: the module's hash, its cache entry and its code are those Warp makes (the header only spares
re-parsing), and the user's own Warp modules compile as Warp compiles them. On a single core, with
``warp.config.use_precompiled_headers`` off, where the header already exists, or where no core is idle
(:func:`_idle_core`), Warp's own path runs.

This wraps ``warp._src.build.build_cpu`` (Warp 1.19); where that function is not found with the
parameters used here, nothing is wrapped.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

#: ``warp._src.build.build_cpu``'s parameters that :func:`_plan` reads or sets.
_PARAMETERS = ("use_precompiled_headers", "pch_dir", "block_dim", "optimization_level", "extra_flags")

#: The settings by which Warp names (and builds) a header; a module's other settings (``fuse_fp``, say) do not
#: enter it.
_HEADER_SETTINGS = (
    "block_dim",
    "mode",
    "verify_fp",
    "enable_tiles_in_stack_memory",
    "optimization_level",
    "extra_flags",
)

_LOADING = threading.local()
_LOCK = threading.Lock()
#: The header builds started, by the settings of the compile that started them (folder, block size, flags):
#: Warp names a header by those settings.
_HEADERS: dict[tuple, Future] = {}


def _after_fork() -> None:
    # a forked child has none of the parent's threads: a build in flight would never finish there
    global _LOCK
    _LOCK = threading.Lock()
    _HEADERS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


@contextlib.contextmanager
def loading() -> Iterator[None]:
    """Around a load of one of warpgeo's modules on this thread (what :func:`install`'s wrapper acts on)."""
    outer = getattr(_LOADING, "active", False)
    _LOADING.active = True
    try:
        yield
    finally:
        _LOADING.active = outer


def install() -> None:
    """Wrap Warp's CPU build once (after Warp is imported). Does nothing where Warp's build differs."""
    import warp._src.build as build

    original = getattr(build, "build_cpu", None)
    if original is None or getattr(original, "_warpgeo", False):
        return
    try:
        parameters = inspect.signature(original).parameters
    except (TypeError, ValueError):
        return
    if not all(name in parameters for name in _PARAMETERS):
        return

    def build_cpu(obj_path: str, cpp_path: str, **kwargs: Any) -> Any:
        if getattr(_LOADING, "active", False):
            kwargs = _plan(original, kwargs)
        return original(obj_path, cpp_path, **kwargs)

    build_cpu._warpgeo = True  # type: ignore[attr-defined]
    build_cpu.__wrapped__ = original  # type: ignore[attr-defined]
    build.build_cpu = build_cpu


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _idle_core() -> bool:
    """Whether a core is free for the header build: two or more cores, and no more threads runnable right now
    than cores besides this one (Linux's ``/proc/loadavg``; elsewhere the last minute's load average). On a
    busy machine the build would take the module's compile's core, and the first op would come later than
    Warp's own way. (Not the load average where the count is known: it lags by a minute, and counts the
    compiles this process or the one before it has just finished.)"""
    cores = _cores()
    if cores < 2:
        return False
    runnable = _runnable_now()
    if runnable is not None:
        return runnable <= cores - 1
    try:
        return os.getloadavg()[0] <= cores - 1
    except (AttributeError, OSError):  # no load average (Windows): assume the cores are there
        return True


def _runnable_now() -> int | None:
    """Threads runnable on the machine at this moment, this one included (``/proc/loadavg``'s fourth field);
    None where that is not known."""
    try:
        with open("/proc/loadavg") as f:
            return int(f.read().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return None


def _plan(original: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The settings for one of warpgeo's compiles: Warp's own, or (the header not built yet in this folder)
    the compile without the header while a thread builds it; a later compile waits for that build."""
    folder = kwargs.get("pch_dir")
    if not kwargs.get("use_precompiled_headers") or not folder:
        return kwargs
    key = (folder, *(repr(kwargs.get(name)) for name in _HEADER_SETTINGS))
    with _LOCK:
        job = _HEADERS.get(key)
        if job is None:
            if _has_header(folder) or not _idle_core():
                return kwargs
            job = _HEADERS[key] = Future()
            builder = threading.Thread(
                target=_build_header, args=(original, kwargs, job), name="warpgeo-header", daemon=False
            )
            builder.start()
            return {**kwargs, "use_precompiled_headers": False, "pch_dir": None}
    with contextlib.suppress(Exception):  # Warp then builds the header itself, or compiles without one
        job.result()
    return kwargs


def _has_header(folder: str) -> bool:
    try:
        return any(name.endswith(".pch") for name in os.listdir(folder))
    except OSError:
        return False


def _build_header(original: Callable[..., Any], kwargs: dict[str, Any], job: Future) -> None:
    """Warp's header, built by compiling an empty source with the header on (not a daemon thread: at exit
    the process waits for it rather than tearing Warp down under a running compile)."""
    scratch = tempfile.mkdtemp(prefix="warpgeo_header_")
    try:
        source = os.path.join(scratch, "header.cpp")
        with open(source, "w") as f:
            f.write("// Warp's precompiled header, built beside a module's compile (warpgeo._compile)\n")
        original(os.path.join(scratch, "header.o"), source, **{**kwargs, "verbose": False})
    except BaseException as error:  # handed to the compiles that wait for it
        job.set_exception(error)
    else:
        job.set_result(None)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
