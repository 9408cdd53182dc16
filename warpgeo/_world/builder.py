"""A world's tables as they are put together (:class:`_Assembly`: each slot's flags and first rows, the flat
tables' parts) and the background build of a CPU world's meshes' tables (:class:`Later`), which the
world takes in between ops (``MeshWorld.wait_tables``)."""

from __future__ import annotations

import os
import threading
import weakref
from concurrent.futures import Future

import numpy as np
import torch

from .. import _threads
from . import meshes as _meshes
from . import tables as _tables

#: The per-slot table fields (``(E, M, ...)``) and the flat ones (rows of every mesh, concatenated); when a
#: world's later tables go in, each gets a new tensor (``MeshWorld._take_tables``).
SLOT_FIELDS = ("grid_dims", "grid_flags", "topo_offsets", "cone_offsets")


FLAT_FIELDS = (
    "grid_cells", "face_neighbors", "vertex_normals", "cone_nodes", "cone_links", "cone_planes", "cone_faces"
)  # fmt: skip


class _Assembly:
    """A world's tables as they are put together: each slot's flags and first rows, and the flat tables'
    parts (a mesh's rows are appended, so rows already handed out never move)."""

    def __init__(self, num_envs: int, max_meshes: int) -> None:
        self.flags = np.zeros((num_envs, max_meshes), dtype=np.int32)
        self.grid_dims = np.zeros((num_envs, max_meshes, 4), dtype=np.int32)
        # closed meshes' pseudo-normal tables, and each mesh's first rows in them (-1: none; int32 offsets)
        self.topo_offsets = np.full((num_envs, max_meshes, 2), -1, dtype=np.int32)
        # convex closed meshes' plane trees (see _plane_tree): first rows in each table, node count
        self.cone_offsets = np.full((num_envs, max_meshes, 4), -1, dtype=np.int32)
        self.grid_values: list[torch.Tensor] = []
        self.grid_rows = 0
        self.topo_parts: list[list[np.ndarray]] = [
            [np.zeros((0, 3), np.int32)],
            [np.zeros((0, 3), np.float64)],
        ]
        self.topo_rows = [0, 0]
        self.cone_parts: list[list[np.ndarray]] = [
            [np.zeros((0, 4), np.float32)],
            [np.zeros((0, 3), np.int32)],
        ]
        self.cone_parts += [[np.zeros((0, 4), np.float32)], [np.zeros(0, np.int32)]]
        self.cone_rows = [0, 0, 0, 0]
        # distance grids (KIND_GRID slots): sizes and first row in voxel_values (-1: none), origin and voxel
        # size, each grid's values (float32, flat) in slot order
        self.voxel_dims = np.zeros((num_envs, max_meshes, 4), dtype=np.int32)
        self.voxel_dims[..., 3] = -1
        self.voxel_frame = np.zeros((num_envs, max_meshes, 4), dtype=np.float64)
        self.voxel_parts: list[torch.Tensor] = []
        self.voxel_rows = 0

    def add_grid(self, e: int, m: int, values: torch.Tensor, origin: tuple, voxel_size: float) -> int:
        """Give slot ``(e, m)`` a distance grid: its ``(X, Y, Z)`` float32 ``values`` appended to the rows of
        ``voxel_values``; returns its first row. ValueError past int32 rows (the kernels' offsets)."""
        first = self.voxel_rows
        if first + values.numel() >= 2**31:
            raise ValueError(
                f"a world's distance grids hold at most 2**31 - 1 voxels in all; got {first + values.numel()}"
            )
        self.voxel_dims[e, m] = (*values.shape, first)
        self.voxel_frame[e, m] = (*origin, voxel_size)
        self.voxel_parts.append(values.reshape(-1))
        self.voxel_rows += values.numel()
        return first

    def grid_tensors(self, device: torch.device) -> dict[str, torch.Tensor]:
        """``voxel_dims``, ``voxel_frame``, ``voxel_values`` on ``device``: made once, at the world's build
        (not among the fields later tables replace: ``MeshWorld.set_grid`` writes ``voxel_values`` in place)."""
        return {
            "voxel_dims": _meshes._dense(self.voxel_dims, device),
            "voxel_frame": _meshes._dense(self.voxel_frame, device),
            "voxel_values": _concat(self.voxel_parts, device),
        }

    def add(self, e: int, m: int, tables: _tables._Built) -> None:
        """Give slot ``(e, m)`` the tables of its mesh (appending its rows)."""
        self.flags[e, m] = tables.flags
        self.grid_dims[e, m] = (*tables.dims, self.grid_rows)
        self.grid_values.append(tables.values)
        self.grid_rows += tables.values.shape[0]
        topology = tables.topology
        if topology is not None and max(self.topo_rows) + max(map(len, topology)) < 2**31:
            self.topo_offsets[e, m] = self.topo_rows
            for parts, part in zip(self.topo_parts, topology, strict=True):
                parts.append(part)
            self.topo_rows = [rows + len(part) for rows, part in zip(self.topo_rows, topology, strict=True)]
            tree = tables.tree
            if tree is not None and max(self.cone_rows) + max(map(len, tree)) < 2**31:
                rows = self.cone_rows
                self.cone_offsets[e, m] = (rows[0], rows[1], rows[2], len(tree[1]))
                for parts, part in zip(self.cone_parts, tree, strict=True):
                    parts.append(part)
                self.cone_rows = [rows + len(part) for rows, part in zip(self.cone_rows, tree, strict=True)]

    def tensors(self, device: torch.device) -> dict[str, torch.Tensor]:
        """The :data:`SLOT_FIELDS` and :data:`FLAT_FIELDS` tensors on ``device``."""
        parts = [*self.topo_parts, *self.cone_parts]
        names = ("face_neighbors", "vertex_normals", "cone_nodes", "cone_links", "cone_planes", "cone_faces")
        return {
            # copies (also on the CPU): the arrays change as later tables are added, the tensors never do
            "grid_dims": _meshes._dense(self.grid_dims, device),
            "grid_flags": _meshes._dense(self.flags, device),
            "grid_cells": _concat(self.grid_values, device),
            "topo_offsets": _meshes._dense(self.topo_offsets, device),
            "cone_offsets": _meshes._dense(self.cone_offsets, device),
            **{
                name: _meshes._dense(np.concatenate(part), device)
                for name, part in zip(names, parts, strict=True)
            },
        }


class Later:
    """The tables of a CPU world's meshes (``prepare.BACKGROUND_FACES``), built on a background thread; the
    world takes them in (:meth:`take`) on its caller's thread, between ops. If the world goes first, or the
    interpreter shuts down, the build stops at its next step. CPU worlds only: on CUDA a thread of its own
    launching kernels could break the caller's graph captures, and the tables' tensors are state that
    captured graphs read in place."""

    def __init__(
        self, assembly: _Assembly, jobs: list[tuple[_meshes._MeshSpec, list[tuple[int, int]]]], device
    ) -> None:
        self.assembly, self._jobs, self._device = assembly, jobs, device
        self._token = _Token()  # only this object holds it: the thread sees it through a weak reference
        self.future: Future = Future()
        self._pid: int | None = None

    def start(self) -> None:
        """Start the build (once the world is set up: its own set-up does not share the CPU with it)."""
        if self._pid is not None:
            return
        self._pid = os.getpid()
        jobs, device, future, token = self._jobs, self._device, self.future, weakref.ref(self._token)

        def alive() -> _Token | None:
            # None once the world is gone, or once the interpreter shuts down (the main thread has ended:
            # its exit joins this thread, and would otherwise wait for the rest of the build)
            return token() if threading.main_thread().is_alive() else None

        def run() -> None:
            try:
                built = _tables.build_tables([spec for spec, _ in jobs], device, alive=alive)
                future.set_result([(tables, slots) for tables, (_, slots) in zip(built, jobs, strict=True)])
            except BaseException as exc:  # handed to the world by take()
                future.set_exception(exc)

        _threads.pool("warpgeo-tables-later", 1, low_priority=True).submit(run)

    def _forked(self) -> None:
        # a forked child (a DataLoader worker) has the parent's world but not its building thread: build again
        if self._pid is not None and self._pid != os.getpid() and not self.future.done():
            self.future, self._pid = Future(), None
            self.start()

    def done(self) -> bool:
        if self.future.done():
            return True
        self._forked()
        return False

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the build finished (or failed) within ``timeout`` seconds."""
        self._forked()
        self.start()  # a no-op once started (the world starts it at the end of its set-up)
        try:
            self.future.exception(timeout)
        except TimeoutError:
            return False
        return True

    def take(self, device: torch.device) -> dict[str, torch.Tensor]:
        """The world's table tensors (:data:`SLOT_FIELDS` and :data:`FLAT_FIELDS`) with the later meshes'
        tables in; raises what the build raised."""
        for tables, slots in self.future.result():
            for e, m in slots:
                self.assembly.add(e, m, tables)
        return self.assembly.tensors(device)


class _Token:
    """A world's build token (weakly referenced by its background build)."""


def _concat(values: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    if not values:
        return torch.zeros(0, dtype=torch.float32, device=device)
    return torch.cat(values).to(device)
