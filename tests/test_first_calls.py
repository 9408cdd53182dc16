"""What a first call in a fresh process costs: after ``warpgeo warmup`` it compiles nothing (it finds in Warp's
kernel cache the very modules its launches load, block size included), and a forked child of a process whose
world's tables were being built builds them itself. Each case runs in subprocesses of its own, with an empty
kernel cache of its own where the cache matters."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

#: The modules the warmup below warms (a few, not all: a full warmup takes about a minute): the three that
#: declare a block size (which on the CPU their launches load with block size 1), and two that declare none.
_WARMED = (
    "warpgeo._kernels.neighbors.knn_grid_float32",
    "warpgeo._kernels.neighbors.ball_query_grid_float32",
    "warpgeo._kernels.chamfer.chamfer_float32",
    "warpgeo._kernels.fps.fps_serial_float32",
    "warpgeo._kernels.sdf.sphere_mesh_cost_float32_cuboids",
)

_WARMUP = """
import sys

import pytest
from warpgeo import _warmup
_warmup.warmup("cpu", quiet=True, only=lambda name: name in sys.argv[1:])
"""

#: First calls in a fresh process (run with ``WARPGEO_VERBOSE=1``: Warp reports every module it loads,
#: "(compiled)" or "(cached)").
_FIRST_CALLS = """
import torch, warpgeo
gen = torch.Generator().manual_seed(0)
x = torch.rand(1, 300, 3, generator=gen)
y = torch.rand(1, 2000, 3, generator=gen)  # beyond the scan's size: the grid's kernels
warpgeo.knn(x, y, 4)
warpgeo.ball_query(x, y, 0.1, 4)
warpgeo.chamfer_distance(x, y)
warpgeo.farthest_point_sampling(x, 8)
world = warpgeo.MeshWorld([warpgeo.Cuboid([0.2, 0.3, 0.4])])
warpgeo.sphere_mesh_cost(torch.rand(1, 8, 4, generator=gen), world)
"""

_LOAD = re.compile(r"Module (\S+) \w+ load on device 'cpu' took [\d.]+ ms\s+\((\w+)\)")


def _run(script: str, cache: str, *args: str) -> str:
    env = {**os.environ, "WARP_CACHE_PATH": cache, "WARPGEO_VERBOSE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_first_calls_after_warmup_compile_nothing_it_warmed(tmp_path):
    """With an empty kernel cache, ``warmup`` of :data:`_WARMED`; then, in a fresh process, the first knn, ball
    query, chamfer distance, FPS and sphere cost load each of those modules from the cache, compiling none
    of them (a module of another block size than the launches' would be compiled again)."""
    cache = str(tmp_path / "kernels")
    _run(_WARMUP, cache, *_WARMED)
    loads = _LOAD.findall(_run(_FIRST_CALLS, cache))
    how = {name: state for name, state in loads if name in _WARMED}
    assert set(how) == set(_WARMED), loads  # the calls load every warmed module
    assert all(state == "cached" for state in how.values()), how


#: A world whose tables are being built in the background, forked while a thread of the parent is in the
#: middle of first launches (it holds the launcher's locks, as the background build does while it loads a
#: module): the child must build its own tables and answer (a DataLoader worker forked while a world builds).
_FORKED = """
import os, threading, torch, trimesh, warpgeo
from warpgeo import _launch
from warpgeo._world import prepare
prepare.BACKGROUND_FACES = 1  # every mesh's tables on the background thread
world = warpgeo.MeshWorld([trimesh.creation.icosphere(subdivisions=3)])
assert world._later is not None  # pending
held, release = threading.Event(), threading.Event()

def first_launch():
    # the locks of the build modules the child needs (as the background build holds one while it loads it)
    from warpgeo._kernels import build_closed, build_grids
    with _launch.first_launch_lock(build_grids.GRIDS["float32"].grid_cells_rows):
        with _launch.first_launch_lock(build_closed.CLOSED_FACES["float32"].closed_faces_rows):
            held.set()
            release.wait()

threading.Thread(target=first_launch, daemon=True).start()
held.wait()
pid = os.fork()
if pid == 0:
    took = world.wait_tables(timeout=60)
    d = warpgeo.signed_distance(torch.zeros(1, 3, dtype=torch.float64), world)
    print("child", took, world._later is None, int(world._tables["grid_flags"].item()), repr(d.item()), flush=True)
    os._exit(0)
release.set()
_, status = os.waitpid(pid, 0)
print("parent", world.wait_tables(timeout=60), status, flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_forked_child_builds_the_tables_pending_at_the_fork():
    import numpy as np
    import trimesh

    done = subprocess.run([sys.executable, "-c", _FORKED], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    child, parent = (line.split() for line in done.stdout.splitlines())
    assert child[:4] == ["child", "True", "True", "1"], done.stdout  # its tables in: closed (FLAG_CLOSED)
    mesh = trimesh.creation.icosphere(subdivisions=3)
    _, depth, _ = trimesh.proximity.closest_point(mesh, np.zeros((1, 3)))  # the centre is inside
    assert abs(float(child[4]) + depth[0]) < 1e-6, (child, depth)
    assert parent == ["parent", "True", "0"], done.stdout


#: A fresh process's first world of a box and a mesh, and its first query: which modules each thread launches.
_FIRST_WORLD = """
import threading, torch, trimesh, warpgeo
from warpgeo import _launch
launched = []
run = _launch.run

def watched(kernel, *args):
    launched.append((threading.current_thread() is threading.main_thread(), kernel.module.name))
    return run(kernel, *args)

_launch.run = watched
world = warpgeo.MeshWorld([trimesh.creation.box(), trimesh.creation.icosphere(subdivisions=3)])
warpgeo.sphere_mesh_cost(torch.rand(64, 4), world)
main = sorted({name for on_main, name in launched if on_main})
assert world.wait_tables(timeout=300)
print(" ".join(main))
print(" ".join(sorted({name for on_main, name in launched if not on_main})))
"""


def test_a_first_world_leaves_its_table_modules_to_the_background():
    """Issue 50: a first world in a fresh process compiled six build modules (10 s with an empty kernel cache)
    before its first query. Now its caller's thread launches only the per-face checks and the query's own
    module; the table builds (edge pairs, the closed-mesh check, grids, pseudo-normals, plane trees) run on
    the background thread, whose modules compile there, side by side with the query's."""
    done = subprocess.run([sys.executable, "-c", _FIRST_WORLD], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    main, background = (line.split() for line in done.stdout.splitlines()[-2:])
    assert [name.split(".")[2] for name in main] == ["build_checks", "sdf"], main
    built = {name.split(".")[2] for name in background}
    assert {"build_pairs", "build_meet", "build_grids", "build_closed"} <= built, background
