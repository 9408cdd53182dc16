"""Kernels compiled at install (warpgeo/_aot.py, setup.py): complete, loaded, and never the wrong code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from warpgeo import _aot, _interop


def _warp_version() -> str:
    return str(_interop.warp().config.version)


def test_the_install_compiled_every_module():
    """README's install (``pip install -e .``) runs setup.py's build hook: every CPU kernel module is in the
    package, under the names the running Warp gives the module and this CPU's object, readable by all."""
    if not _aot.enabled():
        pytest.skip("WARPGEO_AOT=0: the shipped objects are switched off")
    wp = _interop.warp()
    folder = _aot.ROOT / _warp_version()
    manifest = folder / _aot.MANIFEST
    assert manifest.is_file(), (
        f"{manifest} is missing: the install did not compile the kernels (reinstall with pip install -e ., "
        "and read its warnings)"
    )
    recorded = json.loads(manifest.read_text())
    if recorded["sources"] != _aot.sources_digest():
        pytest.skip("warpgeo/_kernels changed since the install compiled them (pip install -e . rebuilds)")
    assert recorded["failed"] == {}
    assert folder.stat().st_mode & 0o777 == 0o755
    cpu = wp.get_device("cpu")
    expected = {}
    for name, ident in _aot.cpu_modules().items():
        module = wp.get_module(name)
        expected[module.get_module_identifier(_aot.CPU_BLOCK_DIM)] = (ident, module)
    assert set(recorded["modules"]) == set(expected)
    for folder_name, (ident, module) in expected.items():
        for file in (
            module._get_compile_output_name(cpu, block_dim=_aot.CPU_BLOCK_DIM),
            module._get_meta_name(block_dim=_aot.CPU_BLOCK_DIM),
        ):
            assert (folder / folder_name / file).is_file(), (ident, file)


def test_cuda_only_modules_are_not_compiled_for_the_cpu():
    every = set(_aot.kernel_modules().values())
    cpu = set(_aot.cpu_modules().values())
    assert {i for i in every if i.startswith("fps_cuda:")} == every - cpu != set()
    assert "fps:fps_serial_float32" in cpu


def test_preload_serves_only_cpu_launches_of_one_thread_per_block(monkeypatch):
    """Other devices and block sizes are Warp's to build; so is everything with WARPGEO_AOT=0."""
    loads = []
    module = types.SimpleNamespace(load=lambda *a, **k: loads.append(a))
    cuda = types.SimpleNamespace(is_cpu=False)
    cpu = types.SimpleNamespace(is_cpu=True)
    assert not _aot.preload(module, cuda, None)
    assert not _aot.preload(module, cpu, 256)
    monkeypatch.setenv("WARPGEO_AOT", "0")
    assert not _aot.preload(module, cpu, None)
    assert loads == []


_CHILD = """
import json, os, sys
from pathlib import Path
import numpy as np
import torch
import warpgeo, warpgeo._aot
from warpgeo._kernels import fps

warpgeo._aot.ROOT = Path(sys.argv[1])
if os.environ.get("CHILD_WARP_MODE"):
    import warp
    warp.config.mode = os.environ["CHILD_WARP_MODE"]
points = torch.from_numpy(np.random.default_rng(0).random((64, 3), dtype=np.float32))
idx = warpgeo.farthest_point_sampling(points, 12).tolist()
module = fps.FPS_SERIAL["float32"].module
cache = Path(os.environ["WARP_CACHE_PATH"])
print(json.dumps({
    "idx": idx,
    "binary": module.execs[(None, 1)].binary_path,
    "cached": sorted(p.name for p in cache.rglob("*.o")),
}))
"""


def _reference_fps(points, k):
    """Greedy FPS from index 0 in float64, ties to the lowest index."""
    import numpy as np

    p = points.astype(np.float64)
    chosen = [0]
    d = ((p - p[0]) ** 2).sum(1)
    for _ in range(k - 1):
        nxt = int(np.argmax(d))  # first maximum: the lowest index
        chosen.append(nxt)
        d = np.minimum(d, ((p - p[nxt]) ** 2).sum(1))
    return chosen


def _child(root: Path, cache: Path, **env) -> dict:
    script = cache.parent / "child.py"  # Warp reads kernel sources from files
    script.write_text(_CHILD)
    run = subprocess.run(
        [sys.executable, str(script), str(root)],
        capture_output=True,
        text=True,
        env={**os.environ, "WARP_CACHE_PATH": str(cache), **env},
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


#: a second module in the test build: its object stands in for a wrong file under FPS's name
_OTHER = "gather:rows_int64_single"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """FPS's small-cloud float32 module (and ``_OTHER``), built the way the install builds every module."""
    root = tmp_path_factory.mktemp("aot") / "objects"
    run = subprocess.run(
        [sys.executable, "-m", "warpgeo._aot", "build", str(root), "fps:fps_serial_float32", _OTHER],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    manifest = json.loads((root / _warp_version() / _aot.MANIFEST).read_text())
    assert sorted(manifest["modules"].values()) == sorted(["fps:fps_serial_float32", _OTHER])
    assert manifest["failed"] == {}
    return root


def test_a_fresh_process_loads_the_shipped_object_and_compiles_nothing(built, tmp_path):
    import numpy as np

    out = _child(built, tmp_path / "cache")
    points = np.random.default_rng(0).random((64, 3), dtype=np.float32)
    assert out["idx"] == _reference_fps(points, 12)
    assert out["cached"] == []  # Warp's cache stayed empty: nothing compiled
    assert Path(out["binary"]).is_relative_to(built / _warp_version())


@pytest.mark.parametrize(
    "case", ["other Warp version", "switched off", "Warp in debug mode", "truncated object", "wrong object"]
)
def test_objects_that_may_not_fit_are_not_loaded(built, tmp_path, case):
    """Objects filed under another Warp version are not looked at (Warp's version is in the module hash
    too); WARPGEO_AOT=0 turns loading off; a process that sets ``warp.config.mode = "debug"`` gets a
    debug build, not the shipped release object (the mode is in the module hash); a file that does not
    load, or that lacks the module's kernels, is dropped. Warp then compiles the module into its cache as
    usual, and the answer is right."""
    import numpy as np

    root, env = built, {}
    if case == "other Warp version":
        root = tmp_path / "objects"
        shutil.copytree(built / _warp_version(), root / "0.0.1")
    elif case == "switched off":
        env["WARPGEO_AOT"] = "0"
    elif case == "Warp in debug mode":
        env["CHILD_WARP_MODE"] = "debug"
    else:  # a damaged file, or another module's code, under the name of FPS's object: refused, not run
        root = tmp_path / "objects"
        shutil.copytree(built, root)
        version = root / _warp_version()
        (fps_object,) = [p for p in version.glob("wp_fps_serial_float32_*/*.o")]
        if case == "truncated object":
            fps_object.write_bytes(fps_object.read_bytes()[:200])
        else:
            (other,) = [p for p in version.glob("wp_warpgeo._kernels.gather.rows_int64_single_*/*.o")]
            shutil.copyfile(other, fps_object)
    out = _child(root, tmp_path / "cache", **env)
    points = np.random.default_rng(0).random((64, 3), dtype=np.float32)
    assert out["idx"] == _reference_fps(points, 12)
    assert len(out["cached"]) == 1 and "fps_serial_float32" in out["cached"][0], out["cached"]
    assert Path(out["binary"]).is_relative_to(tmp_path / "cache")


def test_build_refuses_unknown_module_ids(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "warpgeo._aot", "build", str(tmp_path / "x"), "fps:no_such_module"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode != 0 and "no such kernel modules" in run.stderr
