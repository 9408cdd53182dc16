"""A process's first CPU compile (warpgeo._compile): the module without Warp's precompiled header, the header
built beside it, every later compile with the header."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from warpgeo import _compile

SETTINGS = {
    "mode": "release",
    "verify_fp": False,
    "fast_math": False,
    "fuse_fp": True,
    "extra_flags": "-march=native",
    "optimization_level": 2,
    "verbose": False,
    "block_dim": 1,
    "enable_tiles_in_stack_memory": True,
    "extra_include_dirs": (),
}


class FakeBuild:
    """Stands for Warp's ``build_cpu``: records each call; a compile with the header on and no header in the
    folder "builds" it (writes a .pch file after ``delay`` s)."""

    def __init__(self, delay: float = 0.0, fail: bool = False):
        self.calls: list[tuple[str, dict]] = []
        self.delay, self.fail = delay, fail
        self.lock = threading.Lock()

    def __call__(self, obj_path, cpp_path, **kwargs):
        with self.lock:
            self.calls.append((os.path.basename(cpp_path), kwargs, threading.current_thread().name))
        if kwargs["use_precompiled_headers"] and kwargs["pch_dir"]:
            header = os.path.join(kwargs["pch_dir"], f"builtin_bd{kwargs['block_dim']}.pch")
            if not os.path.exists(header):
                time.sleep(self.delay)
                if self.fail:
                    raise RuntimeError("header build failed")
                with open(header, "w") as f:
                    f.write("pch")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty header table, two cores, and a header folder of the test's own."""
    monkeypatch.setattr(_compile, "_HEADERS", {})
    monkeypatch.setattr(_compile, "_cores", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.3, 0.3, 0.3))
    monkeypatch.setattr(_compile, "_runnable_now", lambda: 1)
    folder = tmp_path / "pch"
    folder.mkdir()
    return {**SETTINGS, "use_precompiled_headers": True, "pch_dir": str(folder)}


def wait_for_builders():
    for thread in threading.enumerate():
        if thread.name == "warpgeo-header":
            thread.join(timeout=30)


def test_first_compile_without_header_while_it_builds(fresh):
    build = FakeBuild(delay=0.2)
    first = _compile._plan(build, fresh)
    assert first["use_precompiled_headers"] is False and first["pch_dir"] is None
    # a later compile (another module option that does not name the header) waits for that header
    later = _compile._plan(build, {**fresh, "fuse_fp": False})
    assert later["use_precompiled_headers"] is True and later["pch_dir"] == fresh["pch_dir"]
    assert os.listdir(fresh["pch_dir"]) == ["builtin_bd1.pch"]  # built before `later` went on
    wait_for_builders()
    assert [name for _, _, name in build.calls] == ["warpgeo-header"]  # one header build, on its own thread
    assert len(_compile._HEADERS) == 1


def test_a_busy_last_minute_but_idle_now(fresh, monkeypatch):
    """The count of threads runnable now decides where it is known (the load average lags, and counts the
    compiles that just ended)."""
    monkeypatch.setattr(os, "getloadavg", lambda: (1.9, 1.5, 1.0))
    assert _compile._plan(FakeBuild(), fresh)["use_precompiled_headers"] is False
    wait_for_builders()


def test_other_header_settings_get_their_own_header(fresh):
    build = FakeBuild()
    _compile._plan(build, fresh)
    other = _compile._plan(build, {**fresh, "block_dim": 8})  # Warp names a header by its block size
    assert other["use_precompiled_headers"] is False
    wait_for_builders()
    assert sorted(os.listdir(fresh["pch_dir"])) == ["builtin_bd1.pch", "builtin_bd8.pch"]


@pytest.mark.parametrize(
    "case",
    [
        "one core",
        "busy",
        "busy now",
        "header exists",
        "headers off",
        "no folder",
        "other thread's header exists",
    ],
)
def test_warps_own_path(fresh, monkeypatch, case):
    settings = dict(fresh)
    if case == "one core":
        monkeypatch.setattr(_compile, "_cores", lambda: 1)
    elif case == "busy":  # no count of runnable threads: both cores busy over the last minute
        monkeypatch.setattr(_compile, "_runnable_now", lambda: None)
        monkeypatch.setattr(os, "getloadavg", lambda: (1.6, 1.0, 0.5))
    elif case == "busy now":  # a quiet last minute, but another thread runs beside this one right now
        monkeypatch.setattr(_compile, "_runnable_now", lambda: 2)
    elif case == "header exists":
        with open(os.path.join(fresh["pch_dir"], "builtin_bd1_o2_f123.pch"), "w") as f:
            f.write("pch")
    elif case == "headers off":
        settings["use_precompiled_headers"] = False
    elif case == "no folder":
        settings["pch_dir"] = None
    build = FakeBuild()
    if case == "other thread's header exists":  # a folder of its own per thread: this one has none yet
        with tempfile.TemporaryDirectory() as other:
            with open(os.path.join(other, "builtin_bd1.pch"), "w") as f:
                f.write("pch")
            assert _compile._plan(build, settings)["use_precompiled_headers"] is False
        wait_for_builders()
        return
    assert _compile._plan(build, settings) == settings
    assert build.calls == [] and _compile._HEADERS == {}


def test_failed_header_build_leaves_warp_to_it(fresh):
    build = FakeBuild(fail=True)
    assert _compile._plan(build, fresh)["use_precompiled_headers"] is False
    wait_for_builders()
    # the failure is not raised into the next compile: Warp builds the header itself there, or goes without
    assert _compile._plan(build, fresh) == fresh


def test_fork_forgets_builds_in_flight(fresh):
    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    gate = threading.Event()

    def blocked(obj_path, cpp_path, **kwargs):
        gate.wait(30)

    _compile._plan(blocked, fresh)  # a build in flight, never finished in a child
    pid = os.fork()
    if pid == 0:  # the child: a compile must not wait for the parent's thread
        code = 0 if _compile._HEADERS == {} else 1
        os._exit(code)
    gate.set()
    _, status = os.waitpid(pid, 0)
    wait_for_builders()
    assert os.waitstatus_to_exitcode(status) == 0


def test_runnable_now_counts_this_thread():
    import sys

    count = _compile._runnable_now()
    assert count >= 1 if sys.platform.startswith("linux") else count is None


def test_install_only_wraps_a_known_build(monkeypatch):
    import warp._src.build as build

    def unknown(obj_path, cpp_path, mode="release"):
        return None

    monkeypatch.setattr(build, "build_cpu", unknown)
    _compile.install()
    assert build.build_cpu is unknown


def test_install_wraps_warps_build_once(monkeypatch):
    import warp._src.build as build

    original = build.build_cpu
    while hasattr(original, "__wrapped__"):
        original = original.__wrapped__
    monkeypatch.setattr(build, "build_cpu", original)
    _compile.install()
    wrapped = build.build_cpu
    assert wrapped is not original and wrapped.__wrapped__ is original
    _compile.install()
    assert build.build_cpu is wrapped


# a real process with an empty Warp cache -----------------------------------------------------------------

_RECORD = """
import json, os, sys, threading, functools, time
import warp._src.build as build
calls = []
original = build.build_cpu

@functools.wraps(original)
def recorded(obj_path, cpp_path, **kwargs):
    folder = kwargs["pch_dir"]
    before = sorted(n for n in os.listdir(folder) if n.endswith(".pch")) if folder else None
    original(obj_path, cpp_path, **kwargs)
    calls.append([os.path.basename(cpp_path), kwargs["use_precompiled_headers"], threading.current_thread().name,
                  before])

build.build_cpu = recorded
import torch, warpgeo, warpgeo._compile
warpgeo._compile._idle_core = lambda: True  # however busy the machine running the tests is
cloud = torch.rand(64, 3)
idx = warpgeo.farthest_point_sampling(cloud, 8)
features = torch.rand(1, 4, 64)
out = warpgeo.gather_points(features, idx[None])
assert torch.equal(out, features[:, :, idx]), "gather"
assert len(set(idx.tolist())) == 8, "fps"
for thread in threading.enumerate():
    if thread.name == "warpgeo-header":
        thread.join()
print(json.dumps(calls))
"""


def test_fresh_process_compiles_first_module_beside_the_header(tmp_path):
    """FPS (its module has fuse_fp off) then gather: FPS's module without the header, the header once on
    its own thread, gather's module with the header, which existed before its compile began."""
    env = {**os.environ, "WARP_CACHE_PATH": str(tmp_path / "cache"), "WARPGEO_AOT": "0"}  # compiled here
    script = tmp_path / "record.py"  # Warp reads kernel sources from files
    script.write_text(_RECORD)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    calls = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(calls) == 3, calls
    modules = [c for c in calls if c[2] == "MainThread"]
    header = [c for c in calls if c[2] == "warpgeo-header"]
    assert len(header) == 1 and header[0][1] is True, calls
    assert [m[1] for m in modules] == [False, True], calls
    assert "fps" in modules[0][0] and "gather" in modules[1][0], calls
    assert len(modules[1][3]) == 1, calls  # the header was there when gather's compile began
