"""Shared fixtures: every device test runs on the CPU, and on CUDA when a GPU is present.

**What only CUDA can run is listed here, in one place** (:data:`CUDA_ONLY`, :data:`TWO_GPUS`): each entry is
a test file or a test, runnable on a machine with CUDA (``benchmarks/gpu_check.py`` runs them there) and
skipped on this one with the entry's reason. The CUDA half of every ``device``-parametrised test is skipped
the same way. CUDA's *algorithms* (sorts, block kernels, row splits) run here on CPU tensors
(``tests/test_cuda_paths.py``); what is listed below needs the device itself. No test file carries a
``skipif`` of its own for CUDA (``test_cuda_paths.py::test_cuda_only_tests_are_listed_in_one_place``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
import torch

#: test file, or file::test -> what it needs CUDA for
CUDA_ONLY = {
    "test_cuda_graphs.py": "CUDA graphs: capture with torch.cuda.graph and torch.compile(mode='reduce-overhead'), "
    "replay with new inputs",
    "test_cuda_only.py": "side streams, pinned host-to-device transfers, sync-debug mode on a whole step",
    "test_interop.py::test_cuda_device_and_current_stream": "torch's current CUDA stream reaching Warp",
    "test_fps.py::test_grid_designs_on_cuda": "FPS's persistent kernel: a grid barrier of co-resident blocks",
    "test_fps.py::test_strip_design_on_cuda": "FPS's strip kernel: a block's registers on an SM",
    "test_host_cost.py::test_cuda_asks_torch_for_the_current_stream_once_per_call": "torch's current CUDA "
    "stream, looked up once per call",
    "test_host_cost.py::test_cuda_launches_go_to_a_side_stream_made_current": "a side CUDA stream made current",
}
#: tests that need a second GPU (cuda:1)
TWO_GPUS = {
    "test_interop.py::test_cuda_index_is_kept": "cuda:N: the device index reaching Warp",
    "test_cuda_only.py::test_ops_on_a_second_gpu": "cuda:N: every op on cuda:1",
}

#: tests that read only warpgeo's op registry: they run on every machine, also in a CUDA-only file
RUN_WITHOUT_CUDA = {"test_every_op_is_covered"}

_DEVICES = ["cpu", "cuda"]


def every_op() -> set[str]:
    """Every op warpgeo declares (``"warpgeo::knn"``, ...): the op modules all imported, then the registry of
    ``warpgeo._op.Op``."""
    import warpgeo
    from warpgeo import _op

    warpgeo.load_ops()
    # every module that declares an op must be among those load_ops imports, or the registry would depend on
    # which tests ran before (read from the sources: an ``Op("warpgeo::...``)
    package = Path(warpgeo.__file__).parent
    declaring = sorted(
        ".".join(["warpgeo", *path.relative_to(package).with_suffix("").parts])
        for path in package.rglob("*.py")
        if re.search(r"\bOp\(\s*\"warpgeo::", path.read_text())
    )
    assert declaring, "no module declares an op: is the search right?"
    missing = [name for name in declaring if name not in sys.modules]
    assert not missing, f"warpgeo.load_ops() does not import {missing}, which declare ops"
    return set(_op.REGISTRY)


def assert_covers_every_op(covered: Iterable[str], suite: str) -> None:
    """A per-op guarantee suite covers exactly the declared ops: an op none of its cases runs (a new op, say)
    fails it, naming the op, and so does a case for an op that no longer exists.

    Args:
        covered: the op names (``"warpgeo::knn"``) the suite's cases run.
        suite: the suite's name, for the message.
    """
    ops, covered = every_op(), set(covered)
    missing, stale = sorted(ops - covered), sorted(covered - ops)
    assert not missing, f"{suite}: no case covers {missing}: add one to this suite for each new op"
    assert not stale, f"{suite}: cases for ops that do not exist: {stale}"


@pytest.fixture(params=_DEVICES)
def device(request) -> torch.device:
    return torch.device(request.param)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _tables_at_once(request, monkeypatch):
    """A test's CPU worlds build their meshes' tables at once (as CUDA worlds do), so that what it reads of a
    world's tables, and the work it counts of a query, does not depend on when a background thread is done.
    The background build (every CPU world's default, ``warpgeo._world.prepare.BACKGROUND_FACES``) is tested
    where a test sets that threshold itself or is marked ``background_tables`` (tests/test_world_build.py,
    tests/test_first_calls.py: subprocesses, the default)."""
    if request.node.get_closest_marker("background_tables") is None:
        from warpgeo._world import prepare

        monkeypatch.setattr(prepare, "BACKGROUND_FACES", 1 << 62)


def _listed(nodeid: str, entries: dict[str, str]) -> str | None:
    path, _, rest = nodeid.partition("::")
    name = path.rsplit("/", 1)[-1]
    test = rest.split("[", 1)[0]
    return entries.get(name) or entries.get(f"{name}::{test}")


def pytest_collection_modifyitems(config, items):
    cuda = torch.cuda.is_available()
    gpus = torch.cuda.device_count() if cuda else 0
    for item in items:
        if item.originalname in RUN_WITHOUT_CUDA:
            continue
        two = _listed(item.nodeid, TWO_GPUS)
        only = _listed(item.nodeid, CUDA_ONLY)
        on_cuda = getattr(item, "callspec", None) is not None and item.callspec.params.get("device") == "cuda"
        if two is not None and gpus < 2:
            item.add_marker(
                pytest.mark.skip(reason=f"needs two CUDA devices ({two}); this machine has {gpus}")
            )
        elif (only is not None or on_cuda) and not cuda:
            what = only or "the CUDA half of a device test"
            item.add_marker(pytest.mark.skip(reason=f"CUDA only ({what}): no CUDA on this machine"))
