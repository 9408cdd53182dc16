"""The package as pip builds it: pure Python, nothing compiled at install (DESIGN "Foundation")."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import warpgeo

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
    # the demo's arm (package data: `warpgeo demo` runs from an installed package)
    assert "warpgeo/data/arm7.urdf" in package and "warpgeo/data/arm7_spheres.json" in package
    data = [n for n in package if n.startswith("warpgeo/data/") and n.endswith((".urdf", ".json"))]
    compiled = [n for n in package if not n.endswith((".py", "py.typed")) and n not in data]
    assert not compiled, compiled


def test_no_build_hook_and_no_warp_at_build_time():
    assert not (ROOT / "setup.py").exists()
    pyproject = (ROOT / "pyproject.toml").read_text()
    build_system = pyproject.split("[build-system]")[1].split("\n[")[0]
    (requires,) = [line for line in build_system.splitlines() if line.startswith("requires")]
    assert "warp" not in requires, requires


def _type_checking_imports() -> dict[str, str]:
    """``name -> module`` of the ``if TYPE_CHECKING:`` imports of ``warpgeo/__init__.py``."""
    tree = ast.parse((ROOT / "warpgeo" / "__init__.py").read_text())
    block = next(
        node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    return {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_public_names_are_declared_once():
    """``warpgeo._HOME`` (name -> module) declares the public names; the rest agrees with it."""
    home = warpgeo._HOME
    assert set(warpgeo.__all__) - {"load_ops"} == set(home), (
        f"__all__ lacks {sorted(set(home) - set(warpgeo.__all__))}, "
        f"_HOME lacks {sorted(set(warpgeo.__all__) - set(home) - {'load_ops'})}"
    )
    assert _type_checking_imports() == home, (
        "the TYPE_CHECKING imports of warpgeo/__init__.py differ from _HOME"
    )
    for name, module in home.items():
        defined = importlib.import_module(f"warpgeo.{module}")
        assert getattr(warpgeo, name) is getattr(defined, name)
        assert name in getattr(defined, "__all__", [name]), f"warpgeo.{module}.__all__ lacks {name!r}"


def test_dir_lists_each_public_name_once():
    names = dir(warpgeo)
    assert len(names) == len(set(names)) and names.count("load_ops") == 1
    assert set(warpgeo.__all__) <= set(names)
    assert not {"TYPE_CHECKING", "annotations", "importlib", "_HOME"} & set(names)
    assert sorted(n for n in names if not n.startswith("__")) == sorted(warpgeo.__all__)


def test_the_dev_extra_installs_what_contributing_runs():
    """CONTRIBUTING's checks run ruff: the ``dev`` extra installs it (with the tests' packages)."""
    text = (ROOT / "pyproject.toml").read_text()
    dev = re.search(r"^dev = \[(.*?)\]$", text, flags=re.M)
    assert dev is not None, "pyproject.toml has no dev extra"
    assert '"ruff' in dev.group(1) and '"warpgeo[test]"' in dev.group(1)
    assert "ruff check" in (ROOT / "CONTRIBUTING.md").read_text()
