"""The torch <-> Warp layer: devices, streams, dtypes, zero-copy wrapping, the launch helper."""

from __future__ import annotations

import gc
import math
import os
import subprocess
import sys
import threading
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch

import warpgeo
from warpgeo import _launch, _warp, checks


def test_import_does_no_work():
    code = "import sys, warpgeo; warpgeo.__all__; print('warp' in sys.modules, 'warpgeo.fps' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_public_names_resolve():
    import warpgeo

    assert callable(warpgeo.farthest_point_sampling)
    assert issubclass(warpgeo.FarthestPointSampling, torch.autograd.Function)
    with pytest.raises(AttributeError, match="no_such_name"):
        warpgeo.no_such_name  # noqa: B018


# devices and streams -----------------------------------------------------------------------------------


def test_cpu_device():
    assert str(_warp.warp_device(torch.device("cpu"))) == "cpu"
    assert _warp.warp_stream(torch.device("cpu")) is None


@pytest.mark.parametrize("device", ["meta", "mps"])
def test_unsupported_device_raises(device):
    with pytest.raises(ValueError, match=device):
        _warp.warp_device(torch.device(device))


def test_cuda_device_and_current_stream():
    assert str(_warp.warp_device(torch.device("cuda:0"))) == "cuda:0"
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        stream = _warp.warp_stream(torch.device("cuda:0"))
        assert stream.cuda_stream == side.cuda_stream


def test_cuda_index_is_kept():
    assert str(_warp.warp_device(torch.device("cuda:1"))) == "cuda:1"
    with torch.cuda.device(1):
        assert str(_warp.warp_device(torch.device("cuda"))) == "cuda:1"


# dtypes ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "compute"),
    [
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.float32),
        (torch.float64, torch.float64),
    ],
)
def test_dtype_table(dtype, compute):
    t = torch.zeros(2, 3, dtype=dtype)
    checks.check_float(t, "x")
    assert _warp.compute_dtype(dtype) == compute
    assert _warp.to_compute(t).dtype == compute


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.complex64, torch.uint8])
def test_unsupported_float_dtype_raises(dtype):
    with pytest.raises(TypeError, match=r"spheres must have dtype .*got torch\."):
        checks.check_float(torch.zeros(2, dtype=dtype), "spheres")


def test_index_dtypes():
    checks.check_index(torch.zeros(2, dtype=torch.int32), "idx")
    checks.check_index(torch.zeros(2, dtype=torch.int64), "idx")
    with pytest.raises(TypeError, match="idx"):
        checks.check_index(torch.zeros(2, dtype=torch.float32), "idx")
    with pytest.raises(TypeError, match=r"idx must be a torch\.Tensor"):
        checks.check_index([1, 2], "idx")


def test_same_device_check():
    a = torch.zeros(2)
    assert checks.check_device("a", a=a, b=torch.zeros(1), c=None) == a.device
    with pytest.raises(ValueError, match="b must be on the same device as a"):
        checks.check_device("a", a=a, b=torch.zeros(1, device="meta"))
    with pytest.raises(ValueError, match="warpgeo runs on 'cpu' and 'cuda'"):
        checks.check_device("a", a=torch.zeros(1, device="meta"))


def test_kernel_table_builds_a_module_per_key_on_first_lookup():
    wp = _warp.warp()
    from warpgeo._kernels._table import TABLES, KernelTable

    def fill(out: wp.array(dtype=Any), value: float):
        out[wp.tid()] = out.dtype(value)

    table = KernelTable(
        "tests.test_interop.fill",
        (fill,),
        {"float32": {"out": wp.array(dtype=wp.float32)}, "float64": {"out": wp.array(dtype=wp.float64)}},
        options={"enable_backward": False},
    )
    try:
        assert table.module_name("float32") == "tests.test_interop.fill_float32"
        assert not table._built  # nothing created before a lookup
        kernel = table["float64"].fill
        assert table["float64"].fill is kernel and set(table._built) == {"float64"}
        out = torch.zeros(3, dtype=torch.float64)
        _launch.launch(kernel, 3, device=torch.device("cpu"), out=out, value=2.5)
        assert out.tolist() == [2.5] * 3
        with pytest.raises(KeyError, match="has no 'float16'"):
            table["float16"]
        assert [name for _, name in table.modules()] == [
            "tests.test_interop.fill_float32",
            "tests.test_interop.fill_float64",
        ]
    finally:
        TABLES.remove(table)


# the value-check switch ---------------------------------------------------------------------------------


def test_value_check_switch():
    cpu = torch.device("cpu")
    assert checks.checking_values(cpu)
    with warpgeo.value_checks(False):
        assert not checks.checking_values(cpu)
        with warpgeo.value_checks(True):
            assert checks.checking_values(cpu)
        assert not checks.checking_values(cpu)
    assert checks.checking_values(cpu)
    warpgeo.set_value_checks(False)
    try:
        assert not checks.checking_values(cpu)
    finally:
        warpgeo.set_value_checks(True)
    with pytest.raises(TypeError, match="enabled must be a bool"):
        warpgeo.set_value_checks(1)


# the launch helpers: arguments by name, zero-copy, sizes --------------------------------------------------


def _scale_kernel():
    wp = _warp.warp()

    @wp.kernel(module="unique")
    def scale_rows(
        points: wp.array2d(dtype=wp.vec3),
        factor: float,
        out: wp.array2d(dtype=wp.vec3),
        row_start: int,
    ):
        b = wp.tid() + row_start
        for i in range(points.shape[1]):
            out[b, i] = points[b, i] * factor

    return scale_rows


def test_launch_binds_by_name_zero_copy_and_strided():
    kernel = _scale_kernel()
    cpu = torch.device("cpu")
    base = torch.arange(2 * 5 * 3, dtype=torch.float32).reshape(5, 2, 3)
    points = base.transpose(0, 1)  # (2, 5, 3), not contiguous: passed with its strides, no copy
    out = torch.zeros(2, 5, 3)
    _launch.launch_rows(kernel, 2, device=cpu, points=points, factor=2.0, out=out)
    torch.testing.assert_close(out, points * 2.0)
    out.zero_()
    _launch.launch(kernel, 2, device=cpu, points=points, factor=3.0, out=out, row_start=0)
    torch.testing.assert_close(out, points * 3.0)


def test_split_launch_builds_only_what_cpu_launches_run(monkeypatch):
    """A launch split across threads loads its module once, before the threads start, as a CPU launch loads
    it (one thread per block): no second build of the module's default 256-thread variant, which no CPU
    launch runs (it doubled a first sphere cost's compile time)."""
    kernel = _scale_kernel()
    cpu = torch.device("cpu")
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    points = torch.rand(4, 3, 3)
    out = torch.zeros(4, 3, 3)
    launches = []
    real_run = _launch.run
    monkeypatch.setattr(_launch, "run", lambda *a: (launches.append(a[1]), real_run(*a)))
    _launch.launch_rows(
        kernel, 4, device=cpu, work_per_row=_launch._MIN_SPLIT_WORK, points=points, factor=2.0, out=out
    )
    assert len(launches) > 1  # it did split
    torch.testing.assert_close(out, points * 2.0)
    assert {block_dim for _, block_dim in kernel.module.execs} == {1}


def test_launch_refuses_missing_unexpected_and_mistyped_arguments():
    kernel = _scale_kernel()
    cpu = torch.device("cpu")
    points, out = torch.zeros(2, 5, 3), torch.zeros(2, 5, 3)
    with pytest.raises(TypeError, match=r"missing arguments \['factor'\]"):
        _launch.launch_rows(kernel, 2, device=cpu, points=points, out=out)
    with pytest.raises(TypeError, match=r"unexpected \['scale'\]"):
        _launch.launch_rows(kernel, 2, device=cpu, points=points, scale=2.0, factor=2.0, out=out)
    # Warp itself refuses a wrong element type or rank (the first tensor of its kind per parameter)
    with pytest.raises(
        TypeError, match=r"out=\.\.\.\): a tensor of shape \(2, 5, 3\) and dtype torch.float64"
    ):
        _launch.launch_rows(kernel, 2, device=cpu, points=points, factor=2.0, out=out.double())
    with pytest.raises(TypeError, match=r"factor=\.\.\.\): a tensor"):
        _launch.launch_rows(kernel, 2, device=cpu, points=points, factor=torch.ones(1), out=out)
    with pytest.raises(TypeError, match=r"points=\.\.\.\): a tensor of shape \(2, 5, 4\)"):
        _launch.launch_rows(kernel, 2, device=cpu, points=torch.zeros(2, 5, 4), factor=2.0, out=out)
    with pytest.raises(TypeError, match=r"points=\.\.\.\): a tensor of shape \(2, 5\)"):
        _launch.launch_rows(kernel, 2, device=cpu, points=torch.zeros(2, 5), factor=2.0, out=out)
    # after a good call, a tensor of a new kind is checked again
    _launch.launch_rows(kernel, 2, device=cpu, points=points, factor=2.0, out=out)
    with pytest.raises(
        TypeError, match=r"out=\.\.\.\): a tensor of shape \(2, 5, 3\) and dtype torch.float64"
    ):
        _launch.launch_rows(kernel, 2, device=cpu, points=points, factor=2.0, out=out.double())
    with pytest.raises(TypeError, match=r"out=\.\.\.\): a tensor of shape \(2, 5, 3, 1\)"):
        _launch.launch_rows(kernel, 2, device=cpu, points=points, factor=2.0, out=out[..., None])
    # an empty grid launches nothing
    _launch.launch(kernel, [0], device=cpu, points=points, factor=2.0, out=out, row_start=0)


def test_launch_rewrites_what_changed_between_calls():
    """A launch reuses the arguments it wrote last time where a tensor (pointer, shape, strides, dtype) or a
    scalar is unchanged: a tensor moved to new memory in place, reshaped in place, or a new scalar value must
    reach the kernel, and a value equal but of another type (3 vs 3.0) means the same."""
    kernel = _scale_kernel()
    cpu = torch.device("cpu")
    points = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)
    out = torch.zeros(2, 4, 3)
    for factor in (2.0, 2.0, 3.0, 3, -1.5):
        _launch.launch_rows(kernel, 2, device=cpu, points=points, factor=factor, out=out)
        torch.testing.assert_close(out, points * factor)
    first = out.clone()
    out.set_(torch.zeros(2, 4, 3).untyped_storage(), 0, (2, 4, 3), (12, 3, 1))  # same object, new memory
    _launch.launch_rows(kernel, 2, device=cpu, points=points, factor=-1.5, out=out)
    torch.testing.assert_close(out, first)
    out.resize_(1, 4, 3)  # same memory, fewer rows: the kernel must see the new shape
    _launch.launch_rows(kernel, 1, device=cpu, points=points[:1], factor=5.0, out=out)
    torch.testing.assert_close(out, points[:1] * 5.0)
    points.mul_(2.0)  # new values in the same memory
    _launch.launch_rows(kernel, 1, device=cpu, points=points[:1], factor=5.0, out=out)
    torch.testing.assert_close(out, points[:1] * 5.0)


def test_launches_are_warps_recorded_launch_objects(monkeypatch):
    """Every launch, CPU and CUDA, replays a ``wp.Launch`` recorded by ``wp.launch(..., record_cmd=True)``
    (Warp's public API), one per kernel, device, block size and thread; changes between calls reach the
    kernel and earlier outputs are left alone."""
    wp = _warp.warp()
    monkeypatch.setattr(_launch, "_THREAD", threading.local())  # fresh records
    kernel = _scale_kernel()
    cpu = torch.device("cpu")
    points = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)
    out = torch.zeros(2, 4, 3)
    for factor in (2.0, 3.0, 3):
        _launch.launch_rows(kernel, 2, device=cpu, points=points, factor=factor, out=out)
        torch.testing.assert_close(out, points * factor)
    (record,) = _launch._THREAD.recorded.values()
    assert isinstance(record.cmd, wp.Launch)
    other = torch.zeros(2, 4, 3)
    _launch.launch_rows(kernel, 2, device=cpu, points=points + 1, factor=0.5, out=other)
    torch.testing.assert_close(other, (points + 1) * 0.5)
    torch.testing.assert_close(out, points * 3.0)  # the previous output is left alone
    assert len(_launch._THREAD.recorded) == 1


def _world_struct():
    wp = _warp.warp()
    globals()["wp"] = wp  # the struct's annotations are evaluated in this module's namespace

    @wp.struct
    class Shift:
        offsets: wp.array(dtype=wp.vec3)
        scale: float

    globals()["Shift"] = Shift

    @wp.kernel(module="unique")
    def shift(shifts: Shift, points: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        out[i] = points[i] * shifts.scale + shifts.offsets[i]

    return Shift, shift


def test_struct_arguments_built_from_tensors_and_cached():
    Shift, shift = _world_struct()
    cpu = torch.device("cpu")
    offsets = torch.rand(4, 3)
    points = torch.rand(4, 3)
    world = _launch.struct(Shift, offsets=offsets, scale=2.0)
    assert _launch.struct(Shift, offsets=offsets, scale=2.0) is world  # same tensors: same instance
    assert _launch.struct(Shift, offsets=offsets, scale=3.0) is not world
    out = torch.zeros(4, 3)
    _launch.launch(shift, 4, device=cpu, shifts=world, points=points, out=out)
    torch.testing.assert_close(out, points * 2.0 + offsets)
    offsets.add_(1.0)  # in place: the struct sees the new values (a world's set_poses)
    _launch.launch(shift, 4, device=cpu, shifts=world, points=points, out=out)
    torch.testing.assert_close(out, points * 2.0 + offsets)
    _launch.launch(
        shift,
        4,
        device=cpu,
        shifts=_launch.struct(Shift, offsets=offsets, scale=0.5),
        points=points,
        out=out,
    )
    torch.testing.assert_close(out, points * 0.5 + offsets)
    with pytest.raises(TypeError, match=r"Shift.offsets: a tensor of shape \(4, 3\) and dtype torch.float64"):
        _launch.struct(Shift, offsets=offsets.double(), scale=1.0)
    with pytest.raises(TypeError, match=r"Shift.offsets: a tensor of shape \(2, 4, 3\)"):
        _launch.struct(Shift, offsets=offsets.expand(2, 4, 3), scale=1.0)


def test_launch_blocks_splits_along_batch_then_last_dimension(monkeypatch):
    """The one splitter: with a tiny launch limit the same rows run in several launches (ranges of B, then
    one B entry at a time in chunks of L) and give what one launch gives; a middle dimension too large
    to split is refused naming the input."""
    wp = _warp.warp()

    @wp.kernel(module="unique")
    def double_rows(
        x: wp.array3d(dtype=float), env: wp.array(dtype=float), out: wp.array3d(dtype=float), row_start: int
    ):
        r = wp.tid() + row_start
        n = x.shape[1] * x.shape[2]
        b = r // n
        h = (r // x.shape[2]) % x.shape[1]
        s = r % x.shape[2]
        if b < x.shape[0]:
            out[b, h, s] = 2.0 * x[b, h, s] + env[b]

    cpu = torch.device("cpu")
    x = torch.rand(5, 3, 7)
    env = torch.arange(5, dtype=torch.float32)
    expected = 2.0 * x + env[:, None, None]
    launches = []
    real_run = _launch.run
    monkeypatch.setattr(_launch, "run", lambda *a: (launches.append(a[1]), real_run(*a)))
    for limit, count in ((10**6, 1), (2 * 21, 3), (8, 5 * 4)):  # 8 rows: L=7 in chunks of 2 steps
        monkeypatch.setattr(_launch, "MAX_LAUNCH_ROWS", limit)
        launches.clear()
        out = torch.zeros_like(x)
        _launch.launch_blocks(
            double_rows, (5, 3, 7), device=cpu, sliced={"x": x, "out": out}, per_batch={"env": env}
        )
        torch.testing.assert_close(out, expected)
        assert len(launches) == count, (limit, launches)


def test_launch_rows_fills_row_start_itself():
    kernel = _scale_kernel()
    points = torch.zeros(2, 4, 3)
    with pytest.raises(TypeError, match="fills row_start itself"):
        _launch.launch_rows(
            kernel, 2, device=torch.device("cpu"), points=points, factor=1.0, out=points.clone(), row_start=1
        )


def test_launch_refuses_strides_warp_cannot_address():
    """Warp's array descriptors hold int32 byte strides: a row of 2 GiB is refused, not mis-addressed
    (the storage is reserved, never touched)."""
    kernel = _scale_kernel()
    storage = torch.empty(2**29 + 8, dtype=torch.float32)
    points = storage.as_strided((2, 1, 3), (2**29, 3, 1))  # 2 GiB between the two rows
    with pytest.raises(ValueError, match=r"points: .*2\*\*31 bytes"):
        _launch.launch_rows(
            kernel, 2, device=torch.device("cpu"), points=points, factor=2.0, out=torch.zeros(2, 1, 3)
        )


def test_to_compute_gives_a_dense_last_dimension():
    t = torch.rand(4, 3, 5).transpose(1, 2)  # (4, 5, 3) with a strided last dimension
    out = _warp.to_compute(t)
    assert out.stride(-1) == 1 and torch.equal(out, t)
    dense = torch.rand(4, 5, 3)[:, ::2]  # strided rows, dense last dimension: no copy
    assert _warp.to_compute(dense).data_ptr() == dense.data_ptr()


def test_ops_take_points_whose_coordinates_are_not_adjacent():
    """(B, 3, N) transposed to (B, N, 3), as PointNet++ code does: the same answer as a contiguous copy."""
    points = torch.rand(3, 3, 40).transpose(1, 2)
    assert torch.equal(
        warpgeo.farthest_point_sampling(points, 6), warpgeo.farthest_point_sampling(points.contiguous(), 6)
    )
    found = warpgeo.knn(points, points, 4)
    expected = warpgeo.knn(points.contiguous(), points.contiguous(), 4)
    assert torch.equal(found.idx, expected.idx)


# the value checks' float64 sum -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_sum64_equals_torchs_float64_sum(dtype):
    gen = torch.Generator().manual_seed(0)
    x = (torch.rand(300, 7, generator=gen, dtype=torch.float64) * 100 - 50).to(dtype)
    for t in (x, x.t(), x[::3, 1:5], x.requires_grad_(True) if dtype != torch.float16 else x, x[:0]):
        got = _warp.sum64(t)
        assert got.dtype == torch.float64 and got.shape == ()
        expected = t.detach().sum(dtype=torch.float64)
        assert torch.allclose(got, expected, rtol=1e-12, atol=1e-9), (got, expected)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_sum64_propagates_nan_and_inf(dtype, bad):
    x = torch.zeros(1000, 4, dtype=dtype)
    x[517, 2] = bad
    assert not math.isfinite(_warp.sum64(x).item())
    assert not math.isfinite(_warp.sum64(x[503:600:7]).item())  # a strided view holding it


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_scale_rows_equals_torchs_product(dtype):
    gen = torch.Generator().manual_seed(1)
    rows = torch.rand(5, 40, 4, generator=gen, dtype=torch.float64).to(dtype)
    weights = torch.rand(5, 40, generator=gen, dtype=torch.float64).to(dtype)
    # dense; grad_output of a sum (expanded: zero strides); strided views
    cases = [(weights, rows), (torch.ones(()).to(dtype).expand(5, 40), rows), (weights[:, ::2], rows[:, ::2])]
    for w, r in cases:
        got = _warp.scale_rows(w, r)
        assert got.dtype == dtype and got.shape == r.shape
        assert torch.equal(got, w[..., None] * r)


def test_scale_rows_records_a_graph_when_asked():
    """Under create_graph (grad mode on in the backward) the product stays a torch op: differentiable."""
    w = torch.rand(3, 7, dtype=torch.float64, requires_grad=True)
    r = torch.rand(3, 7, 4, dtype=torch.float64)
    out = _warp.scale_rows(w, r)
    assert out.requires_grad
    (g,) = torch.autograd.grad(out.sum(), w)
    assert torch.allclose(g, r.sum(-1))
    with torch.no_grad():
        assert not _warp.scale_rows(w, r).requires_grad


def test_sphere_cost_double_backward_through_grad_output():
    """d/d(grad_output) of the backward is the kernel's gradient: create_graph keeps that differentiable."""
    world = warpgeo.MeshWorld(
        [
            (
                torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]]),
                torch.tensor([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]]),
            )
        ]
    )
    spheres = torch.tensor(
        [[0.2, 0.2, 0.2, 0.3], [2.0, 2.0, 2.0, 0.1]], dtype=torch.float64, requires_grad=True
    )
    cost = warpgeo.sphere_mesh_cost(spheres, world)
    v = torch.tensor([2.0, 3.0], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(cost, spheres, grad_outputs=v, create_graph=True)
    (unit,) = torch.autograd.grad(warpgeo.sphere_mesh_cost(spheres, world).sum(), spheres)
    (gv,) = torch.autograd.grad(g.sum(), v)
    assert torch.allclose(gv, unit.sum(-1))
    assert torch.allclose(g, v[:, None] * unit)


def test_numpy_paths_step_aside_for_dispatch_modes():
    """Under a TorchDispatchMode (opcheck, fake tensors, a sync checker) torch computes, so the mode sees it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    x = torch.rand(50, 4)
    with Seen() as seen, torch.no_grad():
        _warp.sum64(x)
        _warp.scale_rows(x[:, 0], x)
    assert "sum" in seen.ops and "mul" in seen.ops, seen.ops


# the optional accelerator (warpgeo._fast_launch) and the public path it falls back to --------------------


def test_fast_launch_is_checked_and_gated(monkeypatch):
    from warpgeo import _fast_launch

    check = _fast_launch.enabled.__wrapped__  # the decision itself, not the process's cached one
    assert check() is _fast_launch.enabled()
    wp = _warp.warp()
    if str(wp.config.version).startswith(_fast_launch.TESTED):
        assert check()  # this Warp: on
    monkeypatch.setenv("WARPGEO_FAST_LAUNCH", "0")
    assert not check()
    monkeypatch.setenv("WARPGEO_FAST_LAUNCH", "1")
    monkeypatch.setattr(wp.config, "version", "99.0.0")  # an untested Warp: the public path
    assert not check()
    monkeypatch.setattr(wp.config, "version", _fast_launch.TESTED[0] + "0")
    # a descriptor whose fields are not what the accelerator assumes: off
    monkeypatch.setattr(_fast_launch, "repoint", lambda desc, ptr: None)
    assert not check()


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "public"])
def test_moved_tensors_reach_the_kernel_on_both_paths(monkeypatch, fast):
    """Outputs allocated afresh call after call (the usual op), inputs moved in place: every new pointer
    reaches the kernel, with the accelerator and without it."""
    from warpgeo import _fast_launch

    monkeypatch.setattr(_fast_launch, "enabled", lambda: fast)
    monkeypatch.setattr(_launch, "_THREAD", threading.local())
    kernel = _scale_kernel()
    cpu = torch.device("cpu")
    points = torch.rand(3, 4, 3)
    outs = []
    for factor in (1.0, 2.0, 3.0, 4.0):
        out = torch.empty(3, 4, 3)
        _launch.launch_rows(kernel, 3, device=cpu, points=points, factor=factor, out=out)
        outs.append(out)
        points = points + 1.0  # a new tensor of the same kind
    base = outs[0]
    for k, out in enumerate(outs):
        torch.testing.assert_close(out, (base + k) * (k + 1.0))


def test_op_suites_pass_on_the_public_path():
    """CI runs the op tests with the accelerator off too (WARPGEO_FAST_LAUNCH=0): the public path alone."""
    env = dict(os.environ, WARPGEO_FAST_LAUNCH="0")
    files = [
        "tests/test_fps.py",
        "tests/test_gather.py",
        "tests/test_neighbors.py",
        "tests/test_sdf_cuboids.py",
    ]
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *files],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "public"])
def test_a_launch_keeps_no_tensor_alive(monkeypatch, fast):
    """An op's output is the caller's: once dropped it is freed, whatever the launch recorded."""
    from warpgeo import _fast_launch

    monkeypatch.setattr(_fast_launch, "enabled", lambda: fast)
    monkeypatch.setattr(_launch, "_THREAD", threading.local())
    kernel = _scale_kernel()
    cpu = torch.device("cpu")
    refs = []
    for _ in range(3):
        points, out = torch.rand(2, 4, 3), torch.empty(2, 4, 3)
        _launch.launch_rows(kernel, 2, device=cpu, points=points, factor=2.0, out=out)
        refs += [weakref.ref(points), weakref.ref(out)]
        del points, out
    assert all(r() is None for r in refs)


def test_a_deleted_world_and_its_structs_are_collected():
    import trimesh

    world = warpgeo.MeshWorld([trimesh.creation.box((1, 1, 1))])
    warpgeo.sphere_mesh_cost(torch.tensor([[0.2, 0.0, 0.0, 0.1]], requires_grad=True), world).sum().backward()
    refs = [weakref.ref(world), *(weakref.ref(t) for t in world.kernel_args().world)]
    del world
    gc.collect()
    assert all(r() is None for r in refs)
