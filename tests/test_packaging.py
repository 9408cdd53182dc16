"""The package as pip builds it: pure Python, nothing compiled at install (DESIGN "Foundation")."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_is_pure_python(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = tmp_path.glob("*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    package = [n for n in names if n.startswith("warpgeo/")]
    assert "warpgeo/_kernels/sdf.py" in package and "warpgeo/py.typed" in package
    compiled = [n for n in package if not n.endswith((".py", "py.typed"))]
    assert not compiled, compiled


def test_no_build_hook_and_no_warp_at_build_time():
    assert not (ROOT / "setup.py").exists()
    pyproject = (ROOT / "pyproject.toml").read_text()
    build_system = pyproject.split("[build-system]")[1].split("\n[")[0]
    (requires,) = [line for line in build_system.splitlines() if line.startswith("requires")]
    assert "warp" not in requires, requires
