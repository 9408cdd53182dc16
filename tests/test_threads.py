"""Ops called from several threads at once, first call included (issue 33).

Each case runs in a fresh process with no warm-up call: several threads make their first call of an op
family at the same moment, so the first launch of each kernel (its Warp module loaded, its launch recorded)
happens on several threads at once. Before the launcher took a lock over a kernel's first launch, a thread
could enter a module another thread was still loading: SIGSEGV in about half of the runs of the SDF cases.
A crash shows as the subprocess's exit status (-11), a wrong answer as a failed comparison inside it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import assert_covers_every_op

ROOT = Path(__file__).resolve().parents[1]

# every family builds its inputs first, then computes its answer in the threads; the reference is the same
# call made afterwards on the main thread (the ops are deterministic)
_CASES = {
    "fps": "p = torch.rand(2, 64, 3)\ncall = lambda: g.farthest_point_sampling(p, 8)",
    "gather": (
        "f = torch.rand(2, 4, 32, requires_grad=True)\ni = torch.randperm(32)[:16].repeat(2, 1)\n"
        "call = lambda: both(g.gather_points(f, i), f)"
    ),
    "gather_weighted": (
        "f = torch.rand(2, 4, 32, requires_grad=True)\ni = torch.randperm(32)[:18].view(1, 6, 3).repeat(2, 1, 1)\n"
        "w = torch.rand(2, 6, 3, requires_grad=True)\ncall = lambda: both(g.gather_points(f, i, weight=w), f, w)"
    ),
    "knn": "q = torch.rand(2, 20, 3)\np = torch.rand(2, 64, 3)\ncall = lambda: g.knn(q, p, 4).idx",
    "ball_query": "q = torch.rand(2, 20, 3)\np = torch.rand(2, 64, 3)\ncall = lambda: g.ball_query(q, p, 0.3, 8)",
    "chamfer": (
        "x = torch.rand(2, 40, 3, requires_grad=True)\ny = torch.rand(2, 50, 3, requires_grad=True)\n"
        "call = lambda: both(g.chamfer_distance(x, y).loss, x, y)"
    ),
    "signed_distance": (
        "w = g.MeshWorld([g.Sphere(0.5)])\np = torch.rand(1, 48, 3) - 0.5\ncall = lambda: g.signed_distance(p, w)"
    ),
    "mesh_cost": (
        "w = g.MeshWorld([(torch.tensor([[0., 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]]).numpy(),"
        " torch.tensor([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]]).numpy())])\n"
        "s = torch.cat([torch.rand(1, 48, 3), torch.full((1, 48, 1), 0.1)], -1)\n"
        "call = lambda: g.sphere_mesh_cost(s, w)"
    ),
    "swept_cost": (
        "w = g.MeshWorld([g.Cuboid((1, 1, 1))])\n"
        "s = torch.cat([torch.rand(1, 6, 8, 3), torch.full((1, 6, 8, 1), 0.1)], -1)\n"
        "call = lambda: g.swept_sphere_mesh_cost(s, w, sweep_steps=3)"
    ),
    "cuboid_cost": (
        "w = g.MeshWorld([g.Cuboid((1, 1, 1))])\n"
        "s = torch.cat([torch.rand(1, 48, 3), torch.full((1, 48, 1), 0.1)], -1)\n"
        "call = lambda: g.sphere_mesh_cost(s, w)"
    ),
    "sphere_collision": (
        "w = g.MeshWorld([g.Cuboid((1, 1, 1)), g.Sphere(0.3)], poses=[[0, 0, 0, 1, 0, 0, 0], [0.6, 0, 0, 1, 0, 0, 0]])\n"
        "s = torch.cat([torch.rand(1, 48, 3) * 2 - 1, torch.full((1, 48, 1), 0.1)], -1)\n"
        "call = lambda: g.sphere_collision(s, w)"
    ),
    "closest_point": (
        "w = g.MeshWorld([g.Sphere(0.5)])\np = (torch.rand(1, 48, 3) - 0.5).requires_grad_()\n"
        "call = lambda: both((lambda c: c.point.sum(-1) + c.distance)(g.closest_point(p, w)), p)"
    ),
    "robot": (
        "r = g.Robot.from_urdf('examples/data/arm7.urdf', spheres={'arm_link3': [[0, 0, 0, 0.1]], "
        "'arm_hand': [[0, 0, 0.05, 0.05]]})\n"
        "q = torch.rand(64, r.dof, requires_grad=True)\n"
        "call = lambda: torch.autograd.grad(r.spheres(q).sum(), q)[0]"
    ),
    "raycast": (
        "import trimesh\nw = g.MeshWorld([trimesh.creation.icosphere(radius=0.5), g.Capsule(0.2, 1.0)],"
        " poses=[[0, 0, 0, 1, 0, 0, 0], [0, 1, 0, 1, 0, 0, 0]])\n"
        "o = (torch.rand(1, 48, 3) * 0.2 + torch.tensor([-2.0, 0.4, 0.0])).requires_grad_()\n"
        "d = torch.tensor([1.0, 0.0, 0.0]) + 0.1 * torch.rand(1, 48, 3)\n"
        "call = lambda: both(g.raycast(w, o, d).distance, o)"
    ),
    "self_collision": (
        "s = torch.cat([torch.rand(4, 12, 3), torch.full((4, 12, 1), 0.2)], -1).requires_grad_()\n"
        "pairs = g.collision_pairs([k // 3 for k in range(12)])\n"
        "call = lambda: both(g.self_collision_cost(s, pairs, reduction='sum'), s)"
    ),
    "grid_query": (
        "grid = g.DistanceGrid(torch.rand(6, 5, 4) - 0.5, 0.1, origin=(-0.2, -0.2, -0.1))\n"
        "p = (torch.rand(64, 3) * 0.6 - 0.25).requires_grad_()\n"
        "call = lambda: both(grid.query(p).distance, p)"
    ),
    "grid_build": (
        "occ = torch.rand(12, 9, 7) > 0.7\np = torch.rand(80, 3)\n"
        "call = lambda: torch.cat([g.DistanceGrid.from_occupancy(occ, 0.1).values.flatten(),"
        " g.DistanceGrid.from_points(p, 0.1, bounds=((0, 0, 0), (1, 1, 1))).values.flatten()])"
    ),
    "depth_fusion": (
        "import math\nK = torch.tensor([[40.0, 0, 31.5], [0, 40.0, 23.5], [0, 0, 1]])\n"
        "depth = torch.full((48, 64), 1.0)\nq = [0, 0, -0.6, 1, 0, 0, 0]\n"
        "def call():\n"
        "    f = g.DepthFusion(((-0.5, -0.5, 0.0), (0.5, 0.5, 0.6)), 0.05)\n"
        "    f.integrate(depth, K, q)\n"
        "    return f.distance_grid().values"
    ),
}

#: every op -> the case above that calls it (a backward op: through its forward's gradient, ``both``)
COVERS = {
    "warpgeo::farthest_point_sampling": "fps",
    "warpgeo::gather_points": "gather",
    "warpgeo::gather_points_backward": "gather",
    "warpgeo::gather_points_weighted": "gather_weighted",
    "warpgeo::gather_points_weighted_backward": "gather_weighted",
    "warpgeo::knn": "knn",
    "warpgeo::ball_query": "ball_query",
    "warpgeo::chamfer_distance": "chamfer",
    "warpgeo::chamfer_distance_backward": "chamfer",
    "warpgeo::signed_distance": "signed_distance",
    "warpgeo::sphere_collision": "sphere_collision",
    "warpgeo::closest_point": "closest_point",
    "warpgeo::sphere_mesh_cost": "mesh_cost",
    "warpgeo::swept_sphere_mesh_cost": "swept_cost",
    "warpgeo::self_collision_cost": "self_collision",
    "warpgeo::self_collision_cost_backward": "self_collision",
    "warpgeo::forward_kinematics": "robot",
    "warpgeo::forward_kinematics_backward": "robot",
    "warpgeo::raycast": "raycast",
    "warpgeo::distance_grid_query": "grid_query",
    "warpgeo::distance_grid_from_occupancy": "grid_build",
    "warpgeo::distance_grid_from_points": "grid_build",
    "warpgeo::depth_fusion_integrate": "depth_fusion",
    "warpgeo::depth_fusion_distance": "depth_fusion",
}


def test_every_op_is_covered():
    assert_covers_every_op(COVERS, "test_threads")
    assert set(COVERS.values()) <= set(_CASES)


_SCRIPT = """
import threading, torch, warpgeo as g
torch.manual_seed(0)
def both(out, *leaves):  # the output and its gradients, flat: one tensor to compare
    grads = torch.autograd.grad(out.sum(), leaves)
    return torch.cat([out.detach().flatten(), *(d.flatten() for d in grads)])
{setup}
results, errors = [], []
start = threading.Barrier({threads})
def body():
    try:
        start.wait()
        results.extend(call() for _ in range(50))
    except BaseException as error:
        errors.append(repr(error))
threads = [threading.Thread(target=body) for _ in range({threads})]
[t.start() for t in threads]
[t.join() for t in threads]
assert not errors, errors
expected = call()
assert len(results) == {threads} * 50
assert all(torch.equal(r, expected) for r in results), "an answer from a thread differs"
print("ok")
"""


def _run(setup: str, threads: int) -> subprocess.CompletedProcess:
    code = textwrap.dedent(_SCRIPT).format(setup=setup, threads=threads)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("family", sorted(_CASES))
def test_first_calls_from_four_threads_at_once(family):
    out = _run(_CASES[family], 4)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (
        f"exit status {out.returncode} (-11: a segfault)\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("family", ["signed_distance", "cuboid_cost"])
@pytest.mark.parametrize("round_", range(2))
def test_first_calls_from_two_threads_at_once(family, round_):
    """The SDF families crashed most often: two more fresh processes each, two threads. Slow (~20 s): more
    rounds of what the four-thread case of each family checks in the default run."""
    out = _run(_CASES[family], 2)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (
        f"exit status {out.returncode} (-11: a segfault)\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    )


def test_first_launches_of_different_modules_do_not_wait_for_each_other():
    """The first-launch lock is one per Warp module: a thread loading one module (a world's background table
    build compiling its modules) holds up no first launch of another module (the caller's first query), and
    a first launch of the module it holds waits for it."""
    import threading

    import torch

    import warpgeo
    from warpgeo import _launch
    from warpgeo._kernels import build_grids, fps

    held, release = threading.Event(), threading.Event()

    def hold(kernel):
        with _launch.first_launch_lock(kernel):
            held.set()
            release.wait(120)

    points = torch.rand(64, 3, dtype=torch.float64)
    expected = warpgeo.farthest_point_sampling(points, 8)
    results = []

    def first_call():  # a new thread: its first launch of each kernel takes that kernel's module lock
        results.append(warpgeo.farthest_point_sampling(points, 8))

    serial = fps.FPS_SERIAL["float64"].fps_serial
    holder = threading.Thread(target=hold, args=(build_grids.GRIDS["float32"].grid_cells_rows,))
    holder.start()
    held.wait(60)
    other = threading.Thread(target=first_call)
    other.start()
    other.join(120)
    finished = not other.is_alive()
    release.set()
    holder.join(120)
    assert finished and torch.equal(results[0], expected)  # another module's lock held: it went on
    held.clear()
    release.clear()
    holder = threading.Thread(target=hold, args=(serial,))
    holder.start()
    held.wait(60)
    same = threading.Thread(target=first_call)
    same.start()
    same.join(1.0)
    waited = same.is_alive()  # its own module's lock held: it waits (however long it is given)
    release.set()
    holder.join(120)
    same.join(120)
    assert waited and len(results) == 2 and torch.equal(results[1], expected)
