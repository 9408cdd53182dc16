"""The examples users copy: every docstring example of the public modules and README's Python blocks run."""

from __future__ import annotations

import doctest
import importlib
import re
import subprocess
import sys
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
    "warpgeo.robot",
    "warpgeo.raycasting",
    "warpgeo.queries",
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


def test_readme_python_blocks_run_alone(tmp_path):
    """Each README Python block, pasted alone into a fresh interpreter (its imports included), runs without
    an error. The blocks run as separate processes, a few at a time (each pays torch's import)."""
    blocks = _readme_blocks()
    assert len(blocks) >= 8
    failures, running, pending = [], [], list(enumerate(blocks))
    while pending or running:
        while pending and len(running) < 4:
            i, block = pending.pop(0)
            folder = tmp_path / f"block{i}"  # anything a block writes stays out of the repository
            folder.mkdir()
            proc = subprocess.Popen(
                [sys.executable, "-c", block],
                cwd=folder,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            running.append((i, block, proc))
        i, block, proc = running.pop(0)
        try:
            _, err = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if proc.returncode != 0:
            first = block.strip().splitlines()[0]
            failures.append(f"README block {i} ({first!r}) exited {proc.returncode}:\n{err[-2000:]}")
    assert not failures, "\n\n".join(failures)


def _readme_outputs() -> list[str]:
    """The files README's shell blocks tell a user to write: ``-o X`` / ``--indices X`` arguments and
    ``np.save('X', ...)`` (``-o DIR`` of a synopsis line left out)."""
    text = (ROOT / "README.md").read_text()
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            command = line.split("#", 1)[0]
            found += re.findall(r"(?:-o|--out|--indices)\s+([^\s\]]+)", command)
            found += re.findall(r"np\.save\('([^']+)'", command)
    return [path for path in found if path != "DIR"]


def test_readme_commands_write_only_ignored_files():
    """Running README's command lines in a checkout leaves `git status` clean: what they write is ignored."""
    outputs = _readme_outputs()
    assert len(outputs) >= 5, outputs
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        input="\n".join(outputs),
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert ignored.returncode in (0, 1), ignored.stderr  # 1: nothing ignored (the assertion below says which)
    assert sorted(ignored.stdout.split()) == sorted(outputs), (
        f"README's commands write files .gitignore does not cover: {sorted(set(outputs) - set(ignored.stdout.split()))}"
    )
