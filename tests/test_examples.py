"""Every example runs with its smallest settings, writes a valid PNG, and its loss / cost goes down."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import warpgeo

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_example(script: str, tmp_path: Path, *args: str, timeout: float = 300) -> str:
    png = tmp_path / f"{Path(script).stem}.png"
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--quick", "--device", "cpu", "--out", str(png), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"{script} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    # No stray warnings: neither Python's (e.g. float() of a tensor that requires grad) nor Warp's notice
    # that there is no CUDA driver.
    assert "Warning" not in proc.stderr and "warning" not in proc.stderr, proc.stderr
    check_png(png)
    return proc.stdout


def check_png(path: Path) -> None:
    from matplotlib.image import imread

    assert path.is_file(), f"{path} was not written"
    assert path.read_bytes()[:8] == PNG_MAGIC, f"{path} is not a PNG"
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert image[..., :3].std() > 0.01, f"{path} is blank"


def number(pattern: str, text: str) -> list[float]:
    found = re.findall(pattern, text)
    assert found, f"{pattern!r} not in the output:\n{text}"
    return [float(x) for x in (found[0] if isinstance(found[0], tuple) else found)]


def test_collision_avoidance(tmp_path):
    out = run_example("collision_avoidance.py", tmp_path)
    assert out.startswith("Moving ")  # says what it does before its table
    initial, final = number(r"initial cost ([\d.eE+-]+)\s+final cost ([\d.eE+-]+)", out)
    assert initial > 1.0  # starts deep in collision
    assert final < 0.05 * initial
    assert "collision-free: yes" in out
    iters = re.findall(r"^iter\s+(\d+)\s+cost", out, flags=re.M)
    assert len(iters) >= 3  # prints the cost as it goes


def test_self_collision(tmp_path):
    out = run_example("self_collision.py", tmp_path)
    assert out.startswith("Moving ")  # says what it does before its table
    initial, final = number(r"initial self-collision cost ([\d.eE+-]+)\s+final ([\d.eE+-]+)", out)
    assert initial > 0.05 and final < 0.01 * initial
    world_initial, world_final = number(r"initial world cost ([\d.eE+-]+)\s+final ([\d.eE+-]+)", out)
    assert world_initial > 0 and world_final < 0.01 * world_initial
    free, batch, free_before = number(
        r"collision-free: (\d+)/(\d+) configurations \(at the start: (\d+)/", out
    )
    assert free == batch == 64 and free_before < batch / 2  # most start in collision, all end free
    assert len(re.findall(r"^step\s+\d+\s+self", out, flags=re.M)) >= 3  # prints the costs as it goes


def test_arm_trajectory(tmp_path):
    out = run_example("arm_trajectory.py", tmp_path)
    assert out.startswith("Moving ")  # says what it does before its table
    initial, final = number(r"initial world cost ([\d.eE+-]+)\s+final ([\d.eE+-]+)", out)
    assert initial > 0.1 and final < 0.01 * initial
    free, batch, free_before = number(r"collision-free trajectories: (\d+)/(\d+) \(at the start: (\d+)/", out)
    assert free == batch == 4 and free_before < batch  # through the torus at the start, all free at the end
    assert len(re.findall(r"^step\s+\d+\s+world", out, flags=re.M)) >= 3  # prints the costs as it goes


def test_depth_camera(tmp_path):
    """Three environments, the obstacle elsewhere in each: every camera sees the scene (not every pixel),
    the lidar returns hits, and the number of beams the obstacle takes changes as it moves."""
    out = run_example("depth_camera.py", tmp_path)
    assert out.startswith("Casting rays in 3 environments")
    rows = re.findall(
        r"^env (\d) \(obstacle at y = ([+-][\d.]+)\): camera sees (\d+)/(\d+) pixels, depth ([\d.]+)-([\d.]+) m; "
        r"lidar returns (\d+)/(\d+), obstacle (\d+)$",
        out,
        flags=re.M,
    )
    assert [int(r[0]) for r in rows] == [0, 1, 2], out
    for _, _, seen, pixels, near, far, returns, beams, _ in rows:
        assert 0.3 * int(pixels) < int(seen) < int(pixels)  # the table and floor, and sky above them
        assert 0 < float(near) < float(far) < 10.0
        assert 0 < int(returns) < int(beams)
    assert len({r[8] for r in rows}) > 1, out  # the moving obstacle is hit by a different number of beams


def test_sensor_world(tmp_path):
    out = run_example("sensor_world.py", tmp_path)
    assert out.startswith("Fusing ")  # says what it does before its numbers
    median, p90 = number(r"median ([\d.]+) m, 90th percentile ([\d.]+) m", out)
    assert median < 0.03 and p90 < 0.06  # within about a voxel (3 cm at --quick's default of 2 cm: 1.5)
    initial, final = number(r"initial cost ([\d.eE+-]+)\s+final ([\d.eE+-]+)", out)
    assert initial > 0.3 and final < 0.2 * initial
    assert "collision-free in the true world: yes" in out
    assert len(re.findall(r"^iter\s+\d+\s+cost", out, flags=re.M)) >= 3


def test_collision_avoidance_with_the_torus_of_the_docstring(tmp_path):
    """The line its docstring shows: the torus stands on edge (not a hole the path is caught in), and the
    picture counts four obstacles."""
    torus = str(EXAMPLES / "data" / "torus.obj")
    out = run_example("collision_avoidance.py", tmp_path, "--mesh", torus)
    assert "collision-free: yes" in out and "through 4 obstacles" in out


@pytest.mark.parametrize("script", ["collision_avoidance.py", "point_sampling.py"])
@pytest.mark.parametrize("mesh", ["missing.obj", "notamesh.obj"])
def test_bad_mesh_is_one_line(tmp_path, script, mesh):
    (tmp_path / "notamesh.obj").write_text("this is not a mesh\n")
    proc = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / script),
            "--quick",
            "--device",
            "cpu",
            "--mesh",
            str(tmp_path / mesh),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "--mesh" in proc.stderr.splitlines()[-1], proc.stderr


EXAMPLE_SCRIPTS = [
    "collision_avoidance.py",
    "point_sampling.py",
    "pointnet2_set_abstraction.py",
    "ddp_training.py",
    "self_collision.py",
    "arm_trajectory.py",
    "depth_camera.py",
    "sensor_world.py",
]


@pytest.mark.parametrize(
    ("script", "name"),  # not "device": conftest's
    [(script, "cuda") for script in EXAMPLE_SCRIPTS]
    + [("collision_avoidance.py", name) for name in ("cuda:1", "mps", "nodevice")],
)
def test_a_device_the_machine_lacks_is_one_line(tmp_path, script, name):
    """As the warpgeo command: one line on stderr, exit code 2, no traceback, nothing written (CUDA hidden
    from the process, so that the test means the same on a machine with a GPU)."""
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--quick", "--device", name, "--out", "x.png"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{script}: error: --device"), proc.stderr
    assert name in lines[0]
    assert not list(tmp_path.iterdir())


def test_examples_say_what_every_flag_does():
    """Every flag has a help text; --out gives its default, --mesh says where the mesh goes."""
    for script in (
        "collision_avoidance.py",
        "point_sampling.py",
        "pointnet2_set_abstraction.py",
        "ddp_training.py",
        "self_collision.py",
        "arm_trajectory.py",
        "depth_camera.py",
    ):
        help_text = subprocess.run(
            [sys.executable, str(EXAMPLES / script), "--help"], capture_output=True, text=True, timeout=60
        ).stdout
        lines = help_text.splitlines()
        text = " ".join(help_text.split())
        assert f"(default: {Path(script).stem}.png, in the current folder)" in text, (script, text)  # --out
        if script == "collision_avoidance.py":  # where --mesh goes
            assert "placed last on the path at x = 1.45" in text, text
        if script == "point_sampling.py":
            assert "as it is (its own frame and size" in text, text
        silent = [
            line.strip()
            for line, after in zip(lines, [*lines[1:], ""], strict=True)
            # a flag alone on its line, with no help text on the next one (argparse indents that by 24)
            if re.fullmatch(r"  --[a-z-]+(?: \S+)?", line) and not after.startswith(" " * 10)
        ]
        assert not silent, (script, silent)


def test_point_sampling(tmp_path):
    out = run_example("point_sampling.py", tmp_path)
    rows = re.findall(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", out, flags=re.M)
    assert len(rows) >= 4
    fps = [float(r[1]) for r in rows]
    assert fps == sorted(fps, reverse=True)  # coverage radius shrinks with K
    (ratio,) = number(r"leaves gaps ([\d.]+)x", out)
    assert ratio > 1.2  # FPS covers better than random sampling


def pointnet2_losses(out: str) -> tuple[float, float]:
    first, last = number(r"first \d+ steps ([\d.]+), of the last \d+ steps ([\d.]+)", out)
    return first, last


@pytest.fixture(scope="module")
def pointnet2_eager(tmp_path_factory) -> str:
    return run_example("pointnet2_set_abstraction.py", tmp_path_factory.mktemp("eager"))


def test_pointnet2_set_abstraction(pointnet2_eager):
    first, last = pointnet2_losses(pointnet2_eager)
    assert last < 0.8 * first
    (acc,) = number(r"test accuracy ([\d.]+)", pointnet2_eager)
    assert acc > 0.3  # chance is 0.2


@pytest.mark.slow
def test_pointnet2_set_abstraction_compiled(tmp_path, pointnet2_eager):
    """The example's --compile (~30 s of dynamo and AOT autograd). Slow: the default run captures each op
    with fullgraph=True and its backward in test_fps / test_gather / test_neighbors (aot_eager)."""
    # aot_eager: the full torch.compile capture (dynamo + AOT autograd, fullgraph=True) without
    # inductor's C++ build time; the first step's loss must match the eager run's.
    out = run_example(
        "pointnet2_set_abstraction.py",
        tmp_path,
        "--compile",
        "--compile-backend",
        "aot_eager",
        "--steps",
        "3",
    )
    assert "torch.compile(backend='aot_eager')" in out
    (eager_step0,) = number(r"step\s+0\s+loss ([\d.]+)", pointnet2_eager)
    (compiled_step0,) = number(r"step\s+0\s+loss ([\d.]+)", out)
    assert compiled_step0 == pytest.approx(eager_step0, rel=1e-3)


def test_ddp_training(tmp_path):
    out = run_example("ddp_training.py", tmp_path)
    assert "gradients agree" in out
    (diff,) = number(r"max \|DDP - single process\| = ([\d.eE+-]+)", out)
    assert diff < 1e-4
    first, last = pointnet2_losses(out)
    assert last < first


README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_commands_and_links():
    """README keeps the two set-up commands CI and users run; its links are relative paths into this
    repository that exist (its Python blocks run in tests/test_docs.py)."""
    text = README.read_text()
    assert '\npython3 -m pip install -e ".[demo]" && warpgeo demo\n' in text
    assert '\npython3 -m pip install -q -e ".[test]" && python3 -m pytest -q\n' in text
    assert "](docs/collision_avoidance.png)" in text
    assert "github.com/warpgeo" not in text and "githubusercontent.com/warpgeo" not in text
    relative = re.findall(r"\]\((?!https?://|#)([^)]+)\)", text)
    missing = [link for link in relative if not (README.parent / link).exists()]
    assert len(relative) >= 5 and not missing, missing
    assert "bunny.obj" not in text and (README.parent / "examples" / "data" / "torus.obj").is_file()
    assert re.search(r"^pip install", text, flags=re.M) is None  # python3 -m pip throughout


def test_readme_tour_computes_what_its_comments_say():
    """The tour's indices are integers, its signed distances the ones in its comment, and its gradient goes
    to the centres while the radii stay fixed (a free radius disables spheres)."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    assert namespace["idx"].dtype.is_floating_point is False
    sd = namespace["sd"]
    assert abs(float(sd[0]) + 0.5) < 1e-4 and abs(float(sd[1]) - 1.0) < 1e-4
    assert namespace["centres"].grad is not None and namespace["centres"].grad.shape == (1, 1, 2, 3)
    assert not namespace["spheres"].requires_grad


@pytest.mark.parametrize(
    "script",
    [
        "collision_avoidance.py",
        "point_sampling.py",
        "pointnet2_set_abstraction.py",
        "ddp_training.py",
        "self_collision.py",
        "arm_trajectory.py",
        "depth_camera.py",
    ],
)
def test_example_names_the_demo_extra_without_matplotlib(tmp_path, script):
    code = (
        "import runpy, sys\n"
        "sys.modules['matplotlib'] = None\n"
        f"sys.argv = [{script!r}, '--quick', '--device', 'cpu']\n"
        f"runpy.run_path({str(EXAMPLES / script)!r}, run_name='__main__')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"{script}: error: {script} draws its pictures with matplotlib, which is not installed; "
        'run: python3 -m pip install "warpgeo[demo]"'
    ], proc.stderr
    assert not list(tmp_path.iterdir())  # stopped before any work


def test_pointnet2_picture_labels_the_ball_group_as_a_ball_query(tmp_path):
    """With ``--grouping ball`` the picture's group is the ball query's (the first K in index order within the
    radius), and its legend says so; with kNN, the K nearest."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location(
        "pointnet2_example", EXAMPLES / "pointnet2_set_abstraction.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    cloud = torch.rand(128, 3)
    labels = {}
    for grouping in ("ball", "knn"):
        model = example.PointNet2Classifier(128, grouping=grouping)
        fig = example.plot(str(tmp_path / f"{grouping}.png"), cloud, 0, model, [1.0, 0.5], 0.5)
        legend = fig.axes[0].get_legend()
        labels[grouping] = [t.get_text() for t in legend.get_texts()]
        group = next(c for c in fig.axes[0].collections if c.get_label().startswith("one group"))
        shown = np.asarray(group._offsets3d).T  # the drawn points of the group, in drawing order
        sa = model.sa1
        centre = cloud[warpgeo.farthest_point_sampling(cloud[None], sa.num_centres)[0, 0]]
        d = (cloud - centre).norm(dim=-1)
        if grouping == "ball":  # reference: brute force, the first K indices with d <= radius
            expected = torch.nonzero(d <= sa.radius).flatten()[: sa.k]
        else:
            expected = torch.argsort(d, stable=True)[: sa.k]
        np.testing.assert_allclose(shown, cloud[expected].numpy(), rtol=0, atol=0)
    assert any("first K = 16 points (in index order) within r = 0.35" in t for t in labels["ball"]), labels
    assert not any("nearest" in t for t in labels["ball"]), labels
    assert any("K = 16 nearest" in t for t in labels["knn"]), labels


def test_self_collision_cost_panel_has_axis_labels():
    import importlib.util

    from matplotlib.figure import Figure

    spec = importlib.util.spec_from_file_location("self_collision_example", EXAMPLES / "self_collision.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    ax = Figure().add_subplot()
    example.cost_panel(ax, [(0.5, 0.2), (0.1, 0.0)])
    assert "cost" in ax.get_ylabel() and ax.get_xlabel() == "Adam step"
    assert [line.get_ydata().tolist() for line in ax.get_lines()] == [[0.5, 0.1], [0.2, 0.0]]
