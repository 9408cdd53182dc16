"""The `warpgeo` command: every subcommand, its outputs, and its one-line errors (exit code 2)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import trimesh

import warpgeo
from warpgeo.cli import CliError, main

ROOT = Path(__file__).resolve().parents[1]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def files(tmp_path):
    """A unit sphere mesh (.stl, .obj), a random cloud (.npy, .xyz, .ply) and some broken files."""
    rng = np.random.default_rng(0)
    sphere = trimesh.creation.icosphere(subdivisions=4, radius=1.0)
    sphere.export(tmp_path / "sphere.stl")
    sphere.export(tmp_path / "sphere.obj")
    cloud = rng.random((2000, 3))
    np.save(tmp_path / "cloud.npy", cloud)
    np.savetxt(tmp_path / "cloud.xyz", cloud)
    trimesh.PointCloud(cloud).export(tmp_path / "cloud.ply")
    (tmp_path / "garbage.ply").write_text("this is not a ply file")
    (tmp_path / "garbage.npy").write_text("nor is this a npy file")
    np.save(tmp_path / "flat.npy", rng.random((10, 2)))
    return tmp_path


def run_error(capsys, argv: list[str], fragment: str) -> str:
    """The command fails with exit code 2 and one line on stderr that contains `fragment`."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("warpgeo")]
    assert len(lines) == 1, err
    assert lines[0].startswith("warpgeo: error: ")
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in err
    return lines[0]


# --------------------------------------------------------------------------------------------------------
# demo
# --------------------------------------------------------------------------------------------------------


def test_demo_quick_writes_pngs(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--quick", "-q", "--device", "cpu", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "collision-free: yes" in text
    assert re.search(r"collision-free trajectories: [1-9]\d*/4 \(at the start: 0\)", text), text
    for name in ("collision_avoidance.png", "point_sampling.png", "arm_trajectory.png"):
        assert (out / name).read_bytes()[:8] == PNG_MAGIC


def test_demo_arm_is_the_examples_arm_and_its_path_clears_the_torus():
    """The demo's arm (package data) is the example's, and the optimised path it draws is clear: every sphere
    of the drawn trajectory at least its radius from the torus and above the table, by an independent
    check (trimesh's signed distance to the posed torus, the table's top at z = 0)."""
    from warpgeo import demos

    data = Path(demos.__file__).parent / "data"
    examples = Path(__file__).resolve().parents[1] / "examples" / "data"
    for name in ("arm7.urdf", "arm7_spheres.json"):
        assert (data / name).read_bytes() == (examples / name).read_bytes(), name
    result = demos.run_arm_trajectory(trajectories=2, waypoints=8, steps=30, progress=False)
    assert not result.free_before.any() and result.free_after.any()
    spheres = result.spheres[result.spheres[..., 3] > 0]  # (H * S', 4)
    torus = result.torus.copy()
    x, y, z, w, qx, qy, qz = result.poses["torus"]
    torus.apply_transform(trimesh.transformations.quaternion_matrix([w, qx, qy, qz]))
    torus.apply_translation([x, y, z])
    distance = -trimesh.proximity.signed_distance(torus, spheres[:, :3])  # trimesh: positive inside
    assert (distance > spheres[:, 3]).all()
    on_table = (np.abs(spheres[:, 0] - 0.55) < 0.35) & (np.abs(spheres[:, 1]) < 0.7)
    assert (spheres[on_table, 2] - spheres[on_table, 3] > 0).all()


def test_demo_output_folder_is_a_file(tmp_path, capsys):
    blocker = tmp_path / "taken"
    blocker.write_text("")
    run_error(capsys, ["demo", "--quick", "-o", str(blocker / "sub")], "cannot create output folder")


# --------------------------------------------------------------------------------------------------------
# sample
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".ply", ".npy", ".xyz"])
def test_sample_mesh_surface(files, capsys, suffix):
    out = files / f"out{suffix}"
    assert (
        main(["sample", str(files / "sphere.stl"), "-k", "256", "-o", str(out), "-q", "--device", "cpu"]) == 0
    )
    assert "256 farthest points" in capsys.readouterr().out
    points = (
        np.load(out)
        if suffix == ".npy"
        else np.loadtxt(out)
        if suffix == ".xyz"
        else trimesh.load(out).vertices
    )
    assert points.shape == (256, 3)
    np.testing.assert_allclose(np.linalg.norm(points, axis=1), 1.0, atol=0.01)  # on the sphere's surface
    # FPS spreads the points out: no two closer than a fraction of the mean spacing.
    d = np.linalg.norm(points[:, None] - points[None], axis=-1) + np.eye(len(points)) * 9
    assert d.min() > 0.05


@pytest.mark.parametrize("name", ["cloud.npy", "cloud.xyz", "cloud.ply"])
def test_sample_cloud_matches_fps(files, capsys, name):
    """A cloud's chosen rows are copied as they are: float64 from .npy / text, float32 from this .ply."""
    out = files / "picked.npy"
    assert main(["sample", str(files / name), "-k", "50", "-o", str(out), "-q", "--device", "cpu"]) == 0
    dtype = np.float32 if name.endswith(".ply") else np.float64
    cloud = np.load(files / "cloud.npy").astype(dtype)
    expected = warpgeo.farthest_point_sampling(torch.tensor(cloud), 50).numpy()
    picked = np.load(out)
    assert picked.dtype == dtype
    np.testing.assert_array_equal(picked, cloud[expected])


def test_sample_more_than_available(files, capsys):
    out = files / "all.npy"
    assert main(["sample", str(files / "cloud.npy"), "-k", "5000", "-o", str(out), "-q"]) == 0
    assert "only 2000 points" in capsys.readouterr().out
    assert np.load(out).shape == (2000, 3)


def test_one_point_is_singular(files, capsys):
    np.save(files / "one.npy", np.array([[0.5, 0.5, 0.5]]))
    out = files / "one_out.npy"
    assert main(["sample", str(files / "one.npy"), "-k", "3", "-o", str(out), "-q", "--device", "cpu"]) == 0
    text = capsys.readouterr().out
    assert "(1 point) -> 1 farthest point (only 1 point in the input)" in text, text
    assert "1 points" not in text


def test_sample_keeps_extra_columns_and_writes_indices(files, capsys):
    """(N, 5) .npy and (N, 6) .xyz: the columns after x, y, z ride along; --indices names the rows."""
    rng = np.random.default_rng(3)
    table = np.concatenate([rng.random((300, 3)), rng.integers(0, 255, (300, 3))], axis=1)
    np.save(files / "table.npy", table[:, :5])
    np.savetxt(files / "table.xyz", table)
    for name, columns in (("table.npy", 5), ("table.xyz", 6)):
        out, idx_out = files / f"picked_{columns}.npy", files / f"idx_{columns}.txt"
        argv = ["sample", str(files / name), "-k", "20", "-o", str(out), "--indices", str(idx_out), "-q"]
        assert main([*argv, "--device", "cpu"]) == 0
        assert f"{columns - 3} attributes" in capsys.readouterr().out
        idx = np.loadtxt(idx_out, dtype=np.int64)
        expected = warpgeo.farthest_point_sampling(torch.tensor(table[:, :3]), 20).numpy()
        np.testing.assert_array_equal(idx, expected)
        np.testing.assert_array_equal(np.load(out), table[idx, :columns])
    out = files / "xyz_only.xyz"
    assert main(["sample", str(files / "table.xyz"), "-k", "20", "-o", str(out), "--xyz-only", "-q"]) == 0
    np.testing.assert_array_equal(np.loadtxt(out), table[expected, :3])  # text round-trips exactly


def test_sample_keeps_ply_attributes(files, capsys):
    """A .ply cloud's normals and colours stay with their points, in their own dtypes."""
    rng = np.random.default_rng(4)
    points = rng.random((200, 3)).astype(np.float32)
    normals = rng.normal(size=(200, 3)).astype(np.float32)
    red = rng.integers(0, 256, 200).astype(np.uint8)
    header = "ply\nformat ascii 1.0\nelement vertex 200\n" + "".join(
        f"property {t} {n}\n"
        for t, n in [("float", c) for c in ("x", "y", "z", "nx", "ny", "nz")] + [("uchar", "red")]
    )
    rows = "".join(
        " ".join([*(str(v) for v in p), *(str(v) for v in q), str(r)]) + "\n"
        for p, q, r in zip(points, normals, red, strict=True)
    )
    (files / "attrs.ply").write_text(header + "end_header\n" + rows)
    out, idx_out = files / "attrs_out.ply", files / "attrs_idx.npy"
    argv = ["sample", str(files / "attrs.ply"), "-k", "16", "-o", str(out), "--indices", str(idx_out), "-q"]
    assert main(argv) == 0
    assert "4 attributes (nx, ny, nz, red)" in capsys.readouterr().out
    idx = np.load(idx_out)
    assert idx.dtype == np.int64 and idx.shape == (16,)
    raw = trimesh.load(out).metadata["_ply_raw"]["vertex"]["data"]
    column = {name: np.asarray(raw[name]).reshape(-1) for name in ("x", "nx", "nz", "red")}
    np.testing.assert_array_equal(column["x"], points[idx, 0])
    np.testing.assert_array_equal(column["nx"], normals[idx, 0])
    np.testing.assert_array_equal(column["nz"], normals[idx, 2])
    assert column["red"].dtype == np.uint8
    np.testing.assert_array_equal(column["red"], red[idx])
    run_error(
        capsys,
        ["sample", str(files / "sphere.stl"), "-o", str(out), "--indices", str(idx_out)],
        "--indices needs a point-cloud input",
    )


def test_sample_errors(files, capsys):
    out = str(files / "out.ply")
    run_error(capsys, ["sample", str(files / "missing.ply"), "-o", out], "input file not found")
    run_error(capsys, ["sample", str(files / "garbage.ply"), "-o", out], "cannot read")
    run_error(capsys, ["sample", str(files / "garbage.npy"), "-o", out], "not a .npy file")
    run_error(capsys, ["sample", str(files / "flat.npy"), "-o", out], "expected an (N, 3) array")
    run_error(
        capsys, ["sample", str(files / "cloud.npy"), "-o", str(files / "out.docx")], "unknown file type"
    )
    run_error(
        capsys, ["sample", str(files / "cloud.npy"), "-o", str(files / "no" / "x.ply")], "does not exist"
    )
    run_error(capsys, ["sample", str(files / "cloud.npy"), "-k", "0", "-o", out], "-k must be positive")
    run_error(
        capsys,
        ["sample", str(files / "sphere.stl"), "--surface-samples", "0", "-o", out],
        "--surface-samples must be positive; got 0",
    )
    run_error(
        capsys,
        ["sample", str(files / "cloud.npy"), "-o", out, "--indices", str(files / "idx.ply")],
        "cannot write --indices",
    )
    line = run_error(capsys, ["sample", str(files / "cloud.npy"), "-o", str(files)], "it is a folder")
    assert "give a file name" in line and "unknown file type" not in line
    np.save(files / "empty.npy", np.zeros((0, 3)))
    run_error(capsys, ["sample", str(files / "empty.npy"), "-o", out], "it holds no points")
    (files / "empty.xyz").write_text("")
    run_error(capsys, ["sample", str(files / "empty.xyz"), "-o", out], "it holds no points")
    run_error(capsys, ["sample", str(files), "-o", out], "not a file")
    (files / "cloud.abc").write_text("1 2 3")
    run_error(capsys, ["sample", str(files / "cloud.abc"), "-o", out], "unknown file type")


def test_transposed_tables_are_refused(files, capsys):
    """Points stored as columns ((3, N): x, y and z as rows) would read as 3 points with N - 3 attributes."""
    rng = np.random.default_rng(6)
    columns = rng.random((3, 5000))
    np.save(files / "t.npy", columns)
    np.savetxt(files / "t.xyz", columns[:, :50])
    np.save(files / "t_batch.npy", rng.random((2, 3, 100)))  # channels-first batches
    np.save(files / "t4.npy", rng.random((4, 100)))  # x, y, z, intensity as rows
    out = str(files / "out.npy")
    for name in ("t.npy", "t.xyz", "t4.npy"):
        line = run_error(capsys, ["sample", str(files / name), "-k", "16", "-o", out], "looks transposed")
        assert len(line.replace(str(files), "")) < 300 and "save array.T" in line
    mesh = str(files / "sphere.obj")
    for name in ("t.npy", "t_batch.npy"):
        line = run_error(capsys, ["sdf", mesh, str(files / name), "-o", out], "looks transposed")
        assert len(line.replace(str(files), "")) < 300
    assert not (files / "out.npy").exists()
    # a few points with a few attributes each are rows, as written: (3, 6) is 3 points with r, g, b
    np.save(files / "rgb.npy", np.concatenate([rng.random((3, 3)), np.ones((3, 3))], axis=1))
    assert main(["sample", str(files / "rgb.npy"), "-k", "2", "-o", out, "-q", "--device", "cpu"]) == 0
    assert "3 points with 3 attributes" in capsys.readouterr().out


def test_sample_names_at_most_a_few_attributes(files, capsys):
    rng = np.random.default_rng(7)
    np.save(files / "wide.npy", rng.random((400, 3 + 300)))  # 300 feature columns per point
    out = files / "wide_out.npy"
    assert main(["sample", str(files / "wide.npy"), "-k", "8", "-o", str(out), "-q", "--device", "cpu"]) == 0
    line = capsys.readouterr().out.strip()
    assert "300 attributes (c3, c4," in line and "c302" not in line, line
    assert len(line.replace(str(files), "")) < 200, line
    assert np.load(out).shape == (8, 303)


def test_debug_shows_the_exception(files):
    with pytest.raises(CliError, match="input file not found"):
        main(["sample", str(files / "missing.ply"), "-o", str(files / "o.ply"), "--debug"])
    with pytest.raises(CliError):  # --debug before the subcommand works too
        main(["--debug", "sample", str(files / "missing.ply"), "-o", str(files / "o.ply")])


# --------------------------------------------------------------------------------------------------------
# sdf
# --------------------------------------------------------------------------------------------------------


def test_sdf_npy_keeps_shape_and_sign(files, capsys):
    rng = np.random.default_rng(1)
    directions = rng.normal(size=(4, 5, 3))
    directions /= np.linalg.norm(directions, axis=-1, keepdims=True)
    radii = rng.uniform(0.2, 2.0, size=(4, 5, 1))
    np.save(files / "query.npy", directions * radii)
    out = files / "sd.npy"
    assert main(["sdf", str(files / "sphere.obj"), str(files / "query.npy"), "-o", str(out), "-q"]) == 0
    assert "sign by ray" in capsys.readouterr().out
    sd = np.load(out)
    assert sd.shape == (4, 5)
    np.testing.assert_allclose(sd, radii[..., 0] - 1.0, atol=0.01)  # negative inside


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sdf_keeps_float64(files, capsys, dtype):
    points = (np.random.default_rng(2).random((50, 3)) * 3 - 1.5).astype(dtype)
    np.save(files / "q.npy", points)
    out = files / "sd.npy"
    assert main(["sdf", str(files / "sphere.obj"), str(files / "q.npy"), "-o", str(out), "-q"]) == 0
    sd = np.load(out)
    assert sd.dtype == dtype
    np.testing.assert_allclose(sd, np.linalg.norm(points, axis=1) - 1.0, atol=0.01)


def test_sdf_ignores_extra_columns(files, capsys):
    """(N, 4) .npy and (N, 6) .xyz alike: x, y, z are the first three columns; the rest are ignored."""
    rng = np.random.default_rng(5)
    table = np.concatenate([rng.random((40, 3)) * 2 - 1, rng.random((40, 3))], axis=1)
    np.save(files / "q4.npy", table[:, :4])
    np.savetxt(files / "q6.xyz", table)
    expected = np.linalg.norm(table[:, :3], axis=1) - 1.0
    for name, ignored in (("q4.npy", "1 attribute column"), ("q6.xyz", "3 attribute columns")):
        out = files / f"sd_{name}.npy"
        assert main(["sdf", str(files / "sphere.obj"), str(files / name), "-o", str(out), "-q"]) == 0
        assert f"40 points (ignored {ignored})" in capsys.readouterr().out
        np.testing.assert_allclose(np.load(out), expected, atol=0.01)


def test_sdf_text_io_and_winding(files, capsys):
    out = files / "sd.txt"
    argv = [
        "sdf",
        str(files / "sphere.stl"),
        str(files / "cloud.xyz"),
        "-o",
        str(out),
        "--sign-method",
        "winding",
    ]
    assert main([*argv, "--chunk", "300", "-q"]) == 0
    cloud = np.loadtxt(files / "cloud.xyz")
    np.testing.assert_allclose(np.loadtxt(out), np.linalg.norm(cloud, axis=1) - 1.0, atol=0.01)


def test_sdf_on_an_open_mesh_says_how_it_signs(files, capsys):
    """auto on an open mesh picks winding numbers and says so (and why), offering unsigned for bins."""
    bowl = trimesh.creation.icosphere(subdivisions=3, radius=1.0)
    bowl.update_faces(bowl.triangles_center[:, 2] < 0.5)  # the top cut off: open
    bowl.export(files / "bowl.stl")
    out = files / "sd.npy"
    np.save(files / "q.npy", np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 2.0]]))
    assert main(["sdf", str(files / "bowl.stl"), str(files / "q.npy"), "-o", str(out), "-q"]) == 0
    captured = capsys.readouterr()
    assert "not watertight" in captured.err and "--sign-method unsigned" in captured.err
    assert "sign by winding: auto, the mesh is open" in captured.out
    argv = ["sdf", str(files / "bowl.stl"), str(files / "q.npy"), "-o", str(out), "-q", "--sign-method"]
    assert main([*argv, "unsigned"]) == 0
    assert "sign by unsigned" in capsys.readouterr().out
    assert (np.load(out) >= 0).all()
    assert main(["sdf", str(files / "sphere.stl"), str(files / "q.npy"), "-o", str(out), "-q"]) == 0
    captured = capsys.readouterr()
    assert "watertight" not in captured.err and "sign by ray: auto, the mesh is closed" in captured.out


def test_sdf_ray_on_an_open_mesh_says_so_once(files, capsys, recwarn):
    """--sign-method ray on an open mesh: the CLI's note, and not the library's warning besides."""
    bowl = trimesh.creation.icosphere(subdivisions=3, radius=1.0)
    bowl.update_faces(bowl.triangles_center[:, 2] < 0.5)  # the top cut off: open
    bowl.export(files / "bowl.stl")
    np.save(files / "q.npy", np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 2.0]]))
    argv = ["sdf", str(files / "bowl.stl"), str(files / "q.npy"), "-o", str(files / "sd.npy"), "-q"]
    assert main([*argv, "--sign-method", "ray"]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("not watertight") == 1 and "--sign-method winding" in captured.err
    assert not [w for w in recwarn if "open mesh" in str(w.message)]


def test_sdf_errors(files, capsys):
    mesh, points, out = str(files / "sphere.stl"), str(files / "cloud.npy"), str(files / "sd.npy")
    run_error(capsys, ["sdf", str(files / "missing.stl"), points, "-o", out], "input file not found")
    run_error(capsys, ["sdf", mesh, str(files / "missing.npy"), "-o", out], "points file not found")
    run_error(capsys, ["sdf", str(files / "cloud.npy"), points, "-o", out], "not a triangle mesh")
    run_error(capsys, ["sdf", str(files / "garbage.ply"), points, "-o", out], "cannot read")
    run_error(capsys, ["sdf", mesh, str(files / "flat.npy"), "-o", out], "(..., 3) array")
    run_error(capsys, ["sdf", mesh, points, "-o", str(files / "sd.ply")], "unknown file type")
    run_error(capsys, ["sdf", mesh, points, "-o", str(files)], "it is a folder")
    np.save(files / "empty.npy", np.zeros((0, 3)))
    run_error(capsys, ["sdf", mesh, str(files / "empty.npy"), "-o", out], "it holds no points")
    run_error(capsys, ["sdf", mesh, points, "-o", out, "--chunk", "0"], "--chunk must be positive")


def test_unwritable_output_is_one_line_before_any_work(files, capsys):
    """An output that cannot be created (/proc refuses new files) fails at once, and leaves nothing behind."""
    points = str(files / "cloud.npy")
    for argv in (
        ["sample", points, "-o", "/proc/warpgeo-test.ply"],
        ["sdf", str(files / "sphere.stl"), points, "-o", "/proc/warpgeo-test.npy"],
    ):
        line = run_error(capsys, argv, "cannot write /proc/warpgeo-test.")
        assert "Errno" not in line and "FileNotFoundError" not in line
    assert main(["sample", points, "-k", "4", "-o", str(files / "new.npy"), "-q"]) == 0
    run_error(capsys, ["sample", points, "-o", str(files / "ro" / "x.npy")], "does not exist")
    assert not (files / "ro").exists()


# --------------------------------------------------------------------------------------------------------
# arguments, devices, entry points
# --------------------------------------------------------------------------------------------------------


def test_bad_device(files, capsys):
    argv = ["sample", str(files / "cloud.npy"), "-o", str(files / "o.npy")]
    run_error(capsys, [*argv, "--device", "banana"], "is not a device")
    run_error(capsys, [*argv, "--device", "meta"], "cpu and cuda only")
    run_error(capsys, [*argv, "--device", "cuda:x"], "is not a device")
    if not torch.cuda.is_available():
        run_error(capsys, [*argv, "--device", "cuda"], "CUDA is not available")


def test_bad_arguments_are_refused_before_torch_is_imported(files):
    """A typo costs no torch import (seconds): device names, counts and outputs are checked first."""
    cloud, out = str(files / "cloud.npy"), str(files / "o.npy")
    code = (
        "import sys\nfrom warpgeo.cli import main\n"
        f"codes = [main(['sample', {cloud!r}, '-o', {out!r}, '--device', 'banana']),\n"
        f"         main(['sample', {cloud!r}, '-o', {out!r}, '-k', '0']),\n"
        f"         main(['sdf', {cloud!r}, {cloud!r}, '-o', '/proc/x.npy']),\n"
        "         main(['sample'])]\n"
        "print(codes, 'torch' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "[2, 2, 2, 2] False", proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 4, proc.stderr


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["sample"], "required: MESH_OR_CLOUD, -o/--output (see warpgeo sample --help)"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["sdf", "mesh.obj"], "(see warpgeo sdf --help)"),
        (["sample", "x.npy", "-o", "y.npy", "-k", "many"], "argument -k: invalid int value: 'many'"),
    ],
)
def test_usage_errors_are_one_line(capsys, argv, fragment):
    run_error(capsys, argv, fragment)


def test_version_and_help(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert warpgeo.__version__ in capsys.readouterr().out
    for sub in ("demo", "sample", "sdf"):
        with pytest.raises(SystemExit):
            main([sub, "--help"])
        assert "--device" in capsys.readouterr().out


def test_python_dash_m(files):
    """`python -m warpgeo` is the command: a run that succeeds, and an error without a traceback."""
    out = files / "m.xyz"
    ok = subprocess.run(
        [sys.executable, "-m", "warpgeo", "sample", str(files / "cloud.npy"), "-k", "8", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert np.loadtxt(out).shape == (8, 3)
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "warpgeo",
            "sdf",
            str(files / "garbage.ply"),
            str(files / "cloud.npy"),
            "-o",
            "x.npy",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2
    assert "warpgeo: error: cannot read" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_ops_work_and_demo_names_the_extra_without_matplotlib(tmp_path):
    """With matplotlib missing, the ops run, and `warpgeo demo` says in one line what to install.

    Also: a fresh process's first op is quiet on stderr (no Warp "CUDA driver" notice on CPU machines).
    """
    code = f"""
import sys
sys.modules["matplotlib"] = None  # imports of it now fail, as when it is not installed
import torch, trimesh, warpgeo
idx = warpgeo.farthest_point_sampling(torch.rand(50, 3), 4)
features = torch.randn(1, 2, 50, requires_grad=True)
warpgeo.gather_points(features, idx[None]).sum().backward()
world = warpgeo.MeshWorld([trimesh.creation.box()])
spheres = torch.tensor([[0.1, 0.0, 0.0, 0.2]], requires_grad=True)
warpgeo.sphere_mesh_cost(spheres, world).sum().backward()
print("ops ok", float(warpgeo.signed_distance(torch.zeros(1, 3), world)[0]))
from warpgeo.cli import main
print("demo exit", main(["demo", "--quick", "-o", {str(tmp_path / "demo")!r}]))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "ops ok -0.5" in proc.stdout, proc.stdout + proc.stderr
    assert "demo exit 2" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [
        "warpgeo: error: warpgeo demo draws its pictures with matplotlib, which is not installed; "
        'run: python3 -m pip install "warpgeo[demo]"'
    ], proc.stderr
    assert not (tmp_path / "demo").exists()


def test_warmup_compiles_every_cpu_module_into_warps_cache(capsys):
    """`warpgeo warmup` loads (compiles where not cached) every module of every kernel table that the CPU
    launches, as a CPU launch loads it; a launch afterwards finds its module loaded."""
    from warpgeo import _warmup

    tables = _warmup.kernel_modules()
    cpu_modules = [name for table, _key, name in tables if not table.cuda_only]
    assert len(cpu_modules) >= 10 and len(cpu_modules) < len(tables)  # the CUDA-only FPS modules are left out
    assert main(["warmup", "--device", "cpu"]) == 0
    err = capsys.readouterr().err
    assert f"warpgeo: {len(cpu_modules)} kernel modules ready for cpu" in err
    wp = warpgeo._warp.warp()
    for name in cpu_modules:  # loaded for the block size CPU launches run (one thread per block)
        assert wp.get_module(name).load(wp.get_device("cpu"), 1) is not None


def test_a_cuda_warmup_also_loads_what_a_cuda_world_builds_on_the_host():
    """A CUDA world builds its closed meshes' tables with the build module's kernels on the CPU: a CUDA warmup
    loads that module on the host as well as every module on the device; a CPU warmup loads each once."""
    from warpgeo import _warmup
    from warpgeo._kernels import build_closed

    build = build_closed.CLOSED_FACES.module_name("float32")
    cuda = _warmup.warmup_plan(True)
    assert {(name, host) for _, name, host in cuda if name == build} == {(build, False), (build, True)}
    assert sum(host for _, _, host in cuda) == sum(t.host_too for t, _, _ in _warmup.kernel_modules())
    cpu = _warmup.warmup_plan(False)
    assert not any(host for _, _, host in cpu) and len({name for _, name, _ in cpu}) == len(cpu)


def test_warmup_refuses_devices_warpgeo_does_not_run_on(capsys):
    assert main(["warmup", "--device", "mps"]) != 0
    assert "--device mps" in capsys.readouterr().err


def test_warmup_quiet_prints_nothing_and_its_help_says_what_readme_says(capsys):
    """`warpgeo warmup -q` in a fresh process: exit 0 and an empty stderr (Warp's "CUDA driver" notice hidden:
    the warmup initialises Warp before any op module imports it). Its --help gives README's duration."""
    proc = subprocess.run(
        [sys.executable, "-m", "warpgeo", "warmup", "-q", "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert "CUDA driver" not in proc.stderr
    assert [line for line in proc.stderr.splitlines() if "ready for cpu" not in line] == [], proc.stderr
    with pytest.raises(SystemExit):
        main(["warmup", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "30-60 s on 2 CPU cores" in text
    assert "(30-60 s on 2 CPU cores)" in (ROOT / "README.md").read_text()
