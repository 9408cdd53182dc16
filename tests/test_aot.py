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
    """README's install (``pip install -e .``) runs setup.py's build hook: every kernel module is in the
    package, under the names the running Warp gives the module and this CPU's object."""
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
    cpu = wp.get_device("cpu")
    expected = {}
    for name, ident in _aot.kernel_modules().items():
        module = wp.get_module(name)
        expected[module.get_module_identifier(_aot.CPU_BLOCK_DIM)] = (ident, module)
    assert set(recorded["modules"]) == set(expected)
    for folder_name, (ident, module) in expected.items():
        for file in (
            module._get_compile_output_name(cpu, block_dim=_aot.CPU_BLOCK_DIM),
            module._get_meta_name(block_dim=_aot.CPU_BLOCK_DIM),
        ):
            assert (folder / folder_name / file).is_file(), (ident, file)


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


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """FPS's small-cloud float32 module, built the way the install builds every module."""
    root = tmp_path_factory.mktemp("aot") / "objects"
    run = subprocess.run(
        [sys.executable, "-m", "warpgeo._aot", "build", str(root), "fps:fps_serial_float32"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    manifest = json.loads((root / _warp_version() / _aot.MANIFEST).read_text())
    assert list(manifest["modules"].values()) == ["fps:fps_serial_float32"]
    return root


def test_a_fresh_process_loads_the_shipped_object_and_compiles_nothing(built, tmp_path):
    import numpy as np

    out = _child(built, tmp_path / "cache")
    points = np.random.default_rng(0).random((64, 3), dtype=np.float32)
    assert out["idx"] == _reference_fps(points, 12)
    assert out["cached"] == []  # Warp's cache stayed empty: nothing compiled
    assert Path(out["binary"]).is_relative_to(built / _warp_version())


@pytest.mark.parametrize("case", ["other Warp version", "switched off", "Warp in debug mode"])
def test_objects_that_may_not_fit_are_not_loaded(built, tmp_path, case):
    """Objects filed under another Warp version are not looked at (Warp's version is in the module hash
    too); WARPGEO_AOT=0 turns loading off; a process that sets ``warp.config.mode = "debug"`` gets a
    debug build, not the shipped release object (the mode is in the module hash). Warp then compiles the
    module into its cache as usual."""
    import numpy as np

    root, env = built, {}
    if case == "other Warp version":
        root = tmp_path / "objects"
        shutil.copytree(built / _warp_version(), root / "0.0.1")
    elif case == "switched off":
        env["WARPGEO_AOT"] = "0"
    else:
        env["CHILD_WARP_MODE"] = "debug"
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
