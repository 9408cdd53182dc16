"""The examples users copy: every docstring example of the public modules and README's Python blocks run."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import trimesh

import warpgeo

ROOT = Path(__file__).resolve().parents[1]
MODULES = [
    "warpgeo.checks",
    "warpgeo.fps",
    "warpgeo.gather",
    "warpgeo.neighbors",
    "warpgeo.chamfer",
    "warpgeo.world",
    "warpgeo.sdf",
    "warpgeo.primitives",
    "warpgeo.compat.curobo",
]


def _globals() -> dict:
    """What a docstring example may use without importing it: the libraries and warpgeo's public names."""
    names = {name: getattr(warpgeo, name) for name in warpgeo.__all__}
    return {"torch": torch, "trimesh": trimesh, "np": np, "warpgeo": warpgeo, **names}


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_run(module_name):
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(module, module_name, globs=_globals()) if t.examples]
    for test in tests:
        runner.run(test, clear_globs=True)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} docstring example(s) of {module_name} failed (see stdout)"
    assert results.attempted > 0, f"{module_name} has no docstring example"


def _readme_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_python_blocks_run(tmp_path, monkeypatch):
    """Top to bottom in one namespace, as a reader pastes them into one session."""
    blocks = _readme_blocks()
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
