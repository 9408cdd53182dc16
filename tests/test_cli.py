"""The `warpgeo` command: every subcommand, its outputs, and its one-line errors (exit code 2)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
import trimesh

import warpgeo
from warpgeo.cli import CliError, main

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
    for name in ("collision_avoidance.png", "point_sampling.png"):
        assert (out / name).read_bytes()[:8] == PNG_MAGIC


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
    out = files / "picked.npy"
    assert main(["sample", str(files / name), "-k", "50", "-o", str(out), "-q", "--device", "cpu"]) == 0
    cloud = np.load(files / "cloud.npy")
    expected = warpgeo.farthest_point_sampling(torch.tensor(cloud, dtype=torch.float32), 50).numpy()
    np.testing.assert_allclose(np.load(out), cloud[expected], rtol=1e-6, atol=1e-6)


def test_sample_more_than_available(files, capsys):
    out = files / "all.npy"
    assert main(["sample", str(files / "cloud.npy"), "-k", "5000", "-o", str(out), "-q"]) == 0
    assert "only 2000 points" in capsys.readouterr().out
    assert np.load(out).shape == (2000, 3)


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
    run_error(capsys, ["sample", str(files), "-o", out], "not a file")
    (files / "cloud.abc").write_text("1 2 3")
    run_error(capsys, ["sample", str(files / "cloud.abc"), "-o", out], "unknown file type")


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


def test_sdf_errors(files, capsys):
    mesh, points, out = str(files / "sphere.stl"), str(files / "cloud.npy"), str(files / "sd.npy")
    run_error(capsys, ["sdf", str(files / "missing.stl"), points, "-o", out], "input file not found")
    run_error(capsys, ["sdf", mesh, str(files / "missing.npy"), "-o", out], "points file not found")
    run_error(capsys, ["sdf", str(files / "cloud.npy"), points, "-o", out], "not a triangle mesh")
    run_error(capsys, ["sdf", str(files / "garbage.ply"), points, "-o", out], "cannot read")
    run_error(capsys, ["sdf", mesh, str(files / "flat.npy"), "-o", out], "(..., 3) array")
    run_error(capsys, ["sdf", mesh, points, "-o", str(files / "sd.ply")], "unknown file type")
    run_error(capsys, ["sdf", mesh, points, "-o", out, "--chunk", "0"], "--chunk must be positive")


# --------------------------------------------------------------------------------------------------------
# arguments, devices, entry points
# --------------------------------------------------------------------------------------------------------


def test_bad_device(files, capsys):
    argv = ["sample", str(files / "cloud.npy"), "-o", str(files / "o.npy")]
    run_error(capsys, [*argv, "--device", "banana"], "is not a device")
    run_error(capsys, [*argv, "--device", "meta"], "cpu and cuda only")
    if not torch.cuda.is_available():
        run_error(capsys, [*argv, "--device", "cuda"], "CUDA is not available")


def test_usage_errors_exit_2(capsys):
    for argv in ([], ["sample"], ["frobnicate"], ["sdf", "mesh.obj"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
    capsys.readouterr()


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
