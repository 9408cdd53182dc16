"""With value checks off, no op and no MeshWorld update reads a device value on the host.

A host read is what stalls the CUDA pipeline and what is illegal while a CUDA graph is being captured. This
machine has no GPU, so "no host read" is proven on the CPU by :func:`no_host_reads`, which fails on every
way a tensor's values can reach Python:

* a ``TorchDispatchMode`` that fails on ops whose *output* depends on tensor values on the host:
  ``aten._local_scalar_dense`` (what ``.item()``, ``bool()``, ``float()``, ``int()``, ``operator.index``
  dispatch to), every op tagged ``data_dependent_output`` (``torch.equal``, ``allclose``, ...), every op
  tagged ``dynamic_output_shape`` (``nonzero``, ``unique``, boolean-mask indexing: their output size is
  read on the host), and copies between a CUDA tensor and the CPU (either way: a host-to-device copy from
  pageable memory synchronises too). The mode also runs the Python bodies of
  custom ops (``torch.library.custom_op``) under itself, so it sees inside warpgeo's own ops;
* patched ``Tensor`` methods that read values without going through the dispatcher (checked in
  ``test_harness_catches``): ``tolist``, ``numpy``, ``__array__``, ``cpu``, ``__repr__``, and ``item`` /
  ``__bool__`` / ``__float__`` / ``__int__`` / ``__index__`` / ``__complex__`` as well (they dispatch,
  but a patch also catches them in threads the mode does not reach);
* patched ``torch.tensor``, ``torch.as_tensor`` / ``torch.asarray`` (of non-tensor data, with a
  ``device``) and ``Tensor.new_tensor`` (of non-tensor data): building a tensor from host data on a device
  is, on CUDA, a synchronous copy (``aten.lift_fresh`` cannot tell it from a harmless ``x[i] = 2.0``, so
  the dispatch layer does not use it);
* patched Warp host reads and waits: ``wp.array.numpy`` / ``list`` / ``__array__`` and
  ``wp.synchronize*``;
* on CUDA, ``torch.cuda.set_sync_debug_mode("error")`` on top (every synchronising CUDA call raises).

Each op runs once before the instrumented call: the first call loads (compiles) Warp modules, which is
allowed to wait.
"""

from __future__ import annotations

import contextlib
import operator
import threading

import numpy as np
import pytest
import torch
import trimesh
from conftest import assert_covers_every_op
from torch.utils._python_dispatch import TorchDispatchMode

import warpgeo
from warpgeo import _op, _warp


class HostReadError(AssertionError):
    """An instrumented call read a tensor value on the host (or waited on the device)."""


# --------------------------------------------------------------------------------------------------------
# the harness
# --------------------------------------------------------------------------------------------------------

#: torch.Tensor attributes that hand values to Python. Those marked False bypass the dispatcher (checked by
#: test_harness_catches, which also runs with the dispatch mode alone).
_TENSOR_READS = (
    "item",
    "tolist",
    "numpy",
    "__array__",
    "cpu",
    "__repr__",
    "__bool__",
    "__float__",
    "__int__",
    "__index__",
    "__complex__",
)
_WARP_ARRAY_READS = ("numpy", "list", "__array__")
_WARP_WAITS = ("synchronize", "synchronize_device", "synchronize_stream", "synchronize_event")
_MISSING = object()


def _has_bool_index(args) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())


def _reads_host(func, args, kwargs) -> str | None:
    """Why ``func(*args, **kwargs)`` reads device values on the host, or None."""
    if func is torch.ops.aten._local_scalar_dense.default:
        return "a tensor value read as a Python scalar (.item(), bool(), float(), int(), indexing)"
    tags = set(func.tags)
    if torch.Tag.data_dependent_output in tags:
        return "an op whose Python result depends on tensor values"
    if torch.Tag.dynamic_output_shape in tags:
        packet = func.overloadpacket
        indexing = (torch.ops.aten.index, torch.ops.aten.index_put, torch.ops.aten._index_put_impl_)
        if packet in indexing and not _has_bool_index(args):
            return None  # integer (advanced) indexing: the output size is the index's size
        if packet is torch.ops.aten.repeat_interleave and kwargs.get("output_size") is not None:
            return None
        return "an op whose output size depends on tensor values (read on the host)"
    if func.overloadpacket in (torch.ops.aten._to_copy, torch.ops.aten.copy_):
        src = args[1] if func.overloadpacket is torch.ops.aten.copy_ else args[0]
        dst_device = (
            args[0].device
            if func.overloadpacket is torch.ops.aten.copy_
            else torch.device(kwargs.get("device") or src.device)
        )
        if isinstance(src, torch.Tensor) and src.device.type == "cuda" and dst_device.type == "cpu":
            return "a copy from the device to the host"
        if isinstance(src, torch.Tensor) and src.device.type == "cpu" and dst_device.type == "cuda":
            non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
            if not (non_blocking and src.is_pinned()):
                return "a blocking host-to-device copy (it synchronises; an error during graph capture)"
    return None


def _python_body(func, args, kwargs):
    """The Python implementation of a ``torch.library.custom_op`` for these arguments, or None."""
    from torch._library import custom_ops

    opdef = custom_ops.OPDEFS.get(func._schema.name)
    if opdef is None:
        return None
    devices = {a.device.type for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)}
    device = next(iter(devices)) if len(devices) == 1 else None
    fns = opdef._backend_fns
    return fns.get(device) or fns.get(None) or opdef._init_fn


class _HostReadMode(TorchDispatchMode):
    def __init__(self, harness: _Harness):
        super().__init__()
        self.harness = harness

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        why = _reads_host(func, args, kwargs)
        if why is not None:
            self.harness.fail(f"{func}: {why}")
        if func.namespace not in ("aten", "prims", "prim", "_c10d_functional", "c10d"):
            body = _python_body(func, args, kwargs)
            if body is not None:
                # The mode is switched off while it handles an op; switch it back on for the op's body,
                # so that what a warpgeo custom op does inside is seen too.
                with self:
                    return body(*args, **kwargs)
        return func(*args, **kwargs)


class _Harness:
    def __init__(self):
        self.reads: list[str] = []
        self._lock = threading.Lock()

    def fail(self, what: str) -> None:
        with self._lock:
            self.reads.append(what)
        raise HostReadError(f"host read during an instrumented call: {what}")


def _patch(stack: contextlib.ExitStack, owner, name: str, replacement) -> None:
    before = owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else getattr(owner, name)
    setattr(owner, name, replacement)

    def restore():
        if before is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, before)

    stack.callback(restore)


#: torch functions that build a tensor from host data (Python or numpy values). Given a device, they copy
#: the data there, which from pageable memory synchronises the stream (``memcpy_and_sync``) and fails under
#: graph capture; ``Tensor.new_tensor`` always targets its tensor's device. Without a device they make a CPU
#: tensor, which is fine: moving it to CUDA afterwards is a copy the dispatch layer checks (allowed only
#: ``non_blocking`` from pinned memory). ``as_tensor`` / ``asarray`` of a tensor copy nothing.
_HOST_DATA_FACTORIES = ("tensor", "as_tensor", "asarray")


def _refusing_host_data(harness: _Harness, name: str, original, *, method: bool = False):
    def factory(*args, **kwargs):
        data = args[1] if method else (args[0] if args else kwargs.get("data", kwargs.get("obj")))
        if not isinstance(data, torch.Tensor) and (method or kwargs.get("device") is not None):
            harness.fail(f"torch.{name} of host data onto a device (on CUDA: a synchronous copy)")
        return original(*args, **kwargs)

    return factory


def _refusing(harness: _Harness, what: str):
    def refuse(*args, **kwargs):
        harness.fail(what)

    return refuse


@contextlib.contextmanager
def no_host_reads(*, dispatch: bool = True, patches: bool = True, cuda_sync_debug: bool = True):
    """Raise :class:`HostReadError` on any host read inside the block (see the module docstring).

    Also fails at the end of the block if a read happened whose error was swallowed on the way out.
    ``dispatch`` / ``patches`` switch the two layers separately (for the harness's own tests).
    """
    import warp as wp

    harness = _Harness()
    with contextlib.ExitStack() as stack:
        if patches:
            for name in _TENSOR_READS:
                _patch(stack, torch.Tensor, name, _refusing(harness, f"torch.Tensor.{name}"))
            for name in _HOST_DATA_FACTORIES:
                _patch(stack, torch, name, _refusing_host_data(harness, name, getattr(torch, name)))
            _patch(
                stack,
                torch.Tensor,
                "new_tensor",
                _refusing_host_data(harness, "Tensor.new_tensor", torch.Tensor.new_tensor, method=True),
            )
            for name in _WARP_ARRAY_READS:
                _patch(stack, wp.array, name, _refusing(harness, f"warp.array.{name}"))
            for name in _WARP_WAITS:
                _patch(stack, wp, name, _refusing(harness, f"warp.{name}"))
        if cuda_sync_debug and torch.cuda.is_available():
            previous = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("error")
            stack.callback(torch.cuda.set_sync_debug_mode, previous)
        if dispatch:
            stack.enter_context(_HostReadMode(harness))
        yield harness
    if harness.reads:
        raise HostReadError(f"host reads during an instrumented call: {harness.reads}")


# --------------------------------------------------------------------------------------------------------
# the harness can fail
# --------------------------------------------------------------------------------------------------------


def _warp_array_numpy():
    import warp as wp

    return wp.zeros(3, dtype=wp.float32, device="cpu").numpy()


def _warp_synchronize():
    import warp as wp

    wp.synchronize()


_T = torch.tensor([1.5, -2.0, 0.0])
_READS = {
    "item": lambda: _T[0].item(),
    "bool": lambda: bool(_T[0]),
    "if tensor": lambda: 1 if (_T > 0).any() else 0,
    "float": lambda: float(_T[0]),
    "int": lambda: int(_T[0]),
    "operator.index": lambda: operator.index(_T[0].long()),
    "list index": lambda: [0, 1, 2][_T[2].long()],
    "f-string of a 0-d tensor": lambda: f"{_T.sum():.3f}",
    "f-string of a tensor": lambda: f"{_T}",
    "tolist": lambda: _T.tolist(),
    "numpy": lambda: _T.numpy(),
    "np.asarray": lambda: np.asarray(_T),
    "cpu": lambda: _T.cpu(),
    "torch.equal": lambda: torch.equal(_T, _T),
    "torch.allclose": lambda: torch.allclose(_T, _T),
    "nonzero": lambda: _T.nonzero(),
    "boolean mask": lambda: _T[_T > 0],
    "unique": lambda: _T.unique(),
    "new_tensor of host data": lambda: _T.new_tensor([0.0, 0.0, 0.0, 1.0]),
    "torch.tensor of a list onto a device": lambda: torch.tensor([1, 2], device=_T.device),
    "torch.as_tensor of numpy onto a device": lambda: torch.as_tensor(np.ones(2), device=_T.device),
    "warp.array.numpy": _warp_array_numpy,
    "warp.synchronize": _warp_synchronize,
}
#: reads that only the patches see (the dispatcher never hears of them)
_BYPASS_DISPATCH = {
    "new_tensor of host data",
    "torch.tensor of a list onto a device",
    "torch.as_tensor of numpy onto a device",
    "tolist",
    "numpy",
    "np.asarray",
    "cpu",
    "f-string of a tensor",
    "warp.array.numpy",
    "warp.synchronize",
}


@pytest.mark.parametrize("name", list(_READS))
def test_harness_catches(name):
    """Every kind of host read fails the harness; the dispatch layer alone catches all but the documented
    bypasses (test_dispatch_bypasses_are_real shows those need the patches)."""
    with pytest.raises(HostReadError), no_host_reads():
        _READS[name]()
    if name not in _BYPASS_DISPATCH:
        with pytest.raises(HostReadError), no_host_reads(patches=False):
            _READS[name]()


@pytest.mark.parametrize("name", sorted(_BYPASS_DISPATCH - {"warp.array.numpy", "warp.synchronize"}))
def test_dispatch_bypasses_are_real(name):
    """The reads the patches exist for really do bypass the dispatcher (else the patch would be moot)."""
    with no_host_reads(patches=False):
        _READS[name]()


def test_harness_allows_device_only_work():
    """Integer indexing, gathers, reductions to tensors, creation, scalar stores, ``as_tensor`` of a tensor,
    host data kept on the host, and shape queries read nothing."""
    x = torch.randn(4, 5)
    idx = torch.tensor([3, 0, 1])
    with no_host_reads():
        y = x[idx] + x[:, idx].sum(dim=0, keepdim=True).T[:3]
        z = torch.gather(x, 1, idx[None].expand(4, -1)).amax(dim=1)
        w = torch.where(z > 0, z, torch.zeros_like(z)).to(torch.float64)
        torch.full((3,), 2, dtype=torch.int64).repeat_interleave(2)
        w[1] = 2.0
        torch.as_tensor(w, device=w.device)
        torch.tensor([1, 2])
        assert y.shape == (3, 5) and w.shape == (4,) and x.numel() == 20


@torch.library.custom_op("warpgeo_test_sync::equal_inside", mutates_args=())
def _equal_inside(x: torch.Tensor) -> torch.Tensor:
    # torch.equal reaches only the dispatcher; the harness must see it inside a custom op's body
    return x * 2 if torch.equal(x, x.abs()) else x * 3


@_equal_inside.register_fake
def _(x):
    return torch.empty_like(x)


def test_harness_sees_inside_custom_ops():
    x = torch.randn(3)
    with pytest.raises(HostReadError), no_host_reads(patches=False):
        _equal_inside(x)


class _ReadsInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2 if bool(grad.isfinite().all()) else grad


def test_harness_sees_backward():
    x = torch.randn(3, requires_grad=True)
    y = _ReadsInBackward.apply(x).sum()
    with pytest.raises(HostReadError), no_host_reads():
        y.backward()


def test_harness_reports_swallowed_reads():
    """A read whose error some code swallows still fails the block."""
    with (
        pytest.raises(HostReadError, match="host reads during"),
        no_host_reads(),
        contextlib.suppress(HostReadError),
    ):
        _T.tolist()


def test_harness_restores_everything():
    before = {name: torch.Tensor.__dict__.get(name, _MISSING) for name in _TENSOR_READS}
    with no_host_reads():
        pass
    assert {name: torch.Tensor.__dict__.get(name, _MISSING) for name in _TENSOR_READS} == before
    assert _T.tolist() == [1.5, -2.0, 0.0] and bool(_T[0]) and f"{_T[0]:.1f}" == "1.5"


# --------------------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------------------


def _world(device) -> warpgeo.MeshWorld:
    box = trimesh.creation.box((0.4, 0.4, 0.4))
    ball = trimesh.creation.icosphere(subdivisions=2, radius=0.2)
    poses = [[[0.0, 0.0, 0.0, 1, 0, 0, 0], [0.5, 0.0, 0.0, 1, 0, 0, 0]], [[0.0, 0.3, 0.0, 1, 0, 0, 0]]]
    return warpgeo.MeshWorld.from_envs([[box, ball], [box]], poses=poses, device=device)


def _spheres(shape, device, *, seed=0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    centres = torch.rand(*shape, 3, generator=gen) - 0.5
    radii = 0.02 + 0.05 * torch.rand(*shape, 1, generator=gen)
    return torch.cat([centres, radii], dim=-1).to(device)


def _run_forward_backward(fn, leaves):
    out = fn()
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum(
        (o.float() * torch.linspace(0.5, 1.5, o.numel(), device=o.device).view(o.shape)).sum() for o in outs
    )
    if loss.requires_grad:
        loss.backward()
    for leaf in leaves:
        assert leaf.grad is not None, "the op passed no gradient back"
        leaf.grad = None


def _assert_sync_free(fn, leaves=()):
    """``fn`` forward (and backward, if it needs a gradient) with value checks off makes no host read."""
    with warpgeo.value_checks(False):
        _run_forward_backward(fn, leaves)  # warm-up: loads Warp modules
        out = fn()
        outs = out if isinstance(out, tuple) else (out,)
        weights = [torch.linspace(0.5, 1.5, o.numel(), device=o.device).view(o.shape) for o in outs]
        with no_host_reads():
            out = fn()
            outs = out if isinstance(out, tuple) else (out,)
            loss = sum((o.float() * w).sum() for o, w in zip(outs, weights, strict=True))
            if leaves:
                loss.backward()
    for leaf in leaves:
        assert leaf.grad is not None, "the op passed no gradient back"


# --------------------------------------------------------------------------------------------------------
# every op, checks off: no host read
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["int", "list"])
def test_fps(device, form):
    points = torch.rand(3, 200, 3, device=device)
    lengths = torch.tensor([200, 150, 7], device=device)
    k = 16 if form == "int" else [16, 4, 9]
    _assert_sync_free(lambda: warpgeo.farthest_point_sampling(points, k, lengths=lengths))
    _assert_sync_free(lambda: warpgeo.farthest_point_sampling(points, k, return_distances=True))
    starts = torch.tensor([3, 0, 5], device=device)
    _assert_sync_free(lambda: warpgeo.farthest_point_sampling(points, k, start_index=starts))


def test_fps_tensor_num_samples_reads_once(device):
    """A tensor K needs its maximum on the host (the output's shape): one read, by design."""
    points = torch.rand(2, 100, 3, device=device)
    ks = torch.tensor([5, 9], device=device)
    with warpgeo.value_checks(False):
        warpgeo.farthest_point_sampling(points, ks)
        with pytest.raises(HostReadError), no_host_reads() as harness:
            warpgeo.farthest_point_sampling(points, ks)
    assert len(harness.reads) == 1, harness.reads


@pytest.mark.parametrize("shape", ["plain", "grouped"])
@pytest.mark.parametrize("deterministic", [False, True])
def test_gather(device, shape, deterministic):
    features = torch.randn(2, 5, 40, device=device, requires_grad=True)
    idx_shape = (2, 12) if shape == "plain" else (2, 6, 4)
    idx = torch.randint(-1, 40, idx_shape, device=device)
    _assert_sync_free(
        lambda: warpgeo.gather_points(features, idx, deterministic=deterministic), leaves=[features]
    )
    _assert_sync_free(lambda: warpgeo.gather_points(features, idx.int()), leaves=[features])


def test_gather_weighted(device):
    features = torch.randn(2, 5, 40, device=device, requires_grad=True)
    idx = torch.randint(-1, 40, (2, 6, 3), device=device)
    weight = torch.rand(2, 6, 3, device=device, requires_grad=True)
    _assert_sync_free(lambda: warpgeo.gather_points(features, idx, weight=weight), leaves=[features, weight])


def test_sphere_mesh_cost(device):
    world = _world(device)
    spheres = _spheres((2, 3, 50), device).requires_grad_(True)
    env = torch.tensor([1, 0], device=device)
    eta = torch.tensor(0.05, device=device)
    _assert_sync_free(
        lambda: warpgeo.sphere_mesh_cost(spheres, world, activation_distance=0.05, weight=2.0),
        leaves=[spheres],
    )
    _assert_sync_free(
        lambda: warpgeo.sphere_mesh_cost(
            spheres, world, activation_distance=eta, env_index=env, max_distance=0.1
        ),
        leaves=[spheres],
    )


def test_swept_sphere_mesh_cost(device):
    world = _world(device)
    spheres = _spheres((2, 4, 30), device).requires_grad_(True)
    env = torch.tensor([0, 1], device=device)
    _assert_sync_free(
        lambda: warpgeo.swept_sphere_mesh_cost(
            spheres, world, sweep_steps=3, activation_distance=0.02, env_index=env
        ),
        leaves=[spheres],
    )


def test_signed_distance(device):
    world = _world(device)
    points = _spheres((2, 64), device)[..., :3].contiguous().requires_grad_(True)
    env = torch.tensor([1, 0], device=device)
    _assert_sync_free(lambda: warpgeo.signed_distance(points, world, env_index=env), leaves=[points])


def test_swept_speed_metric(device):
    """The speed metric (torch ops over the swept op's cost) with a tensor dt: no host read either."""
    world = _world(device)
    spheres = _spheres((2, 4, 30), device).requires_grad_(True)
    dt = torch.tensor(0.1, device=device)
    _assert_sync_free(
        lambda: warpgeo.swept_sphere_mesh_cost(
            spheres, world, activation_distance=0.02, speed_metric=True, dt=dt
        ),
        leaves=[spheres],
    )


def test_sphere_collision(device):
    world = _world(device)
    spheres = _spheres((2, 64), device)
    env = torch.tensor([1, 0], device=device)
    _assert_sync_free(lambda: warpgeo.sphere_collision(spheres, world, env_index=env))


def test_closest_point(device):
    world = _world(device)
    points = _spheres((2, 64), device)[..., :3].contiguous().requires_grad_(True)
    env = torch.tensor([1, 0], device=device)
    _assert_sync_free(lambda: tuple(warpgeo.closest_point(points, world, env_index=env))[:2], leaves=[points])


def test_knn(device):
    queries = torch.rand(2, 20, 3, device=device, requires_grad=True)
    points = torch.rand(2, 50, 3, device=device, requires_grad=True)
    lengths = torch.tensor([50, 31], device=device)
    _assert_sync_free(
        lambda: tuple(warpgeo.knn(queries, points, 4, point_lengths=lengths)), leaves=[queries, points]
    )


def test_ball_query(device):
    queries = torch.rand(2, 20, 3, device=device)
    points = torch.rand(2, 50, 3, device=device)
    lengths = torch.tensor([20, 11], device=device)
    _assert_sync_free(lambda: warpgeo.ball_query(queries, points, 0.2, 8, query_lengths=lengths))


def test_robot_spheres_and_link_poses(device):
    """Robot.spheres / link_poses (warpgeo::forward_kinematics and its backward), checks off: no host read."""
    urdf = (
        '<robot name="r"><link name="a"/><link name="b"/><link name="c"/>'
        '<joint name="j1" type="revolute"><parent link="a"/><child link="b"/><origin xyz="0 0 0.3"/>'
        '<axis xyz="0 0 1"/><limit lower="-3" upper="3" effort="1" velocity="1"/></joint>'
        '<joint name="j2" type="prismatic"><parent link="b"/><child link="c"/><origin xyz="0.2 0 0"/>'
        '<axis xyz="1 0 0"/><limit lower="0" upper="1" effort="1" velocity="1"/></joint></robot>'
    )
    robot = warpgeo.Robot.from_urdf(
        urdf, spheres={"b": [[0.1, 0, 0, 0.05]], "c": [[0, 0, 0.1, 0.04]]}, device=device
    )
    q = torch.rand(4, 3, robot.dof, device=device, requires_grad=True)
    _assert_sync_free(lambda: (robot.spheres(q), robot.link_poses(q)), leaves=[q])


@pytest.mark.parametrize("reduction", ["mean", None])
def test_chamfer(device, reduction):
    x = torch.rand(2, 30, 3, device=device, requires_grad=True)
    y = torch.rand(2, 40, 3, device=device, requires_grad=True)
    lengths = torch.tensor([40, 17], device=device)
    _assert_sync_free(
        lambda: warpgeo.chamfer_distance(x, y, y_lengths=lengths, reduction=reduction).loss, leaves=[x, y]
    )


@pytest.mark.parametrize("reduction", ["max", "sum", None])
def test_self_collision(device, reduction):
    spheres = _spheres((3, 12), device).requires_grad_(True)
    pairs = warpgeo.collision_pairs([k // 3 for k in range(12)]).to(device)
    _assert_sync_free(
        lambda: warpgeo.self_collision_cost(spheres, pairs, margin=0.01, reduction=reduction),
        leaves=[spheres],
    )


def test_raycast(device):
    """Rays of two environments, and a depth image whose gradient reaches the camera poses."""
    world = _world(device)
    gen = torch.Generator().manual_seed(3)
    origins = (torch.rand(2, 40, 3, generator=gen) - 0.5).to(device).requires_grad_(True)
    directions = (torch.randn(2, 40, 3, generator=gen) + 0.1).to(device).requires_grad_(True)
    env = torch.tensor([1, 0], device=device)
    _assert_sync_free(
        lambda: warpgeo.raycast(world, origins, directions, env_index=env)[:2], leaves=[origins, directions]
    )
    poses = torch.tensor([[0.0, 0.0, -1.0, 1, 0, 0, 0], [0.1, 0.0, -1.0, 1, 0, 0, 0]], device=device)
    poses.requires_grad_(True)
    K = torch.tensor([20.0, 20.0, 7.5, 5.5], device=device)
    _assert_sync_free(lambda: warpgeo.render_depth(world, K, 16, 12, poses, env_index=env), leaves=[poses])


def test_distance_grid_query(device):
    grid = warpgeo.DistanceGrid(torch.rand(9, 8, 7, device=device) - 0.5, 0.1, origin=(-0.4, -0.4, -0.3))
    points = (torch.rand(2, 64, 3, device=device) - 0.5).requires_grad_(True)
    _assert_sync_free(lambda: grid.query(points).distance, leaves=[points])


def test_distance_grid_builders(device):
    occupied = torch.rand(10, 8, 6, device=device) > 0.7
    cloud = torch.rand(100, 3, device=device)
    bounds = ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    _assert_sync_free(lambda: warpgeo.DistanceGrid.from_occupancy(occupied, 0.1).values)
    _assert_sync_free(lambda: warpgeo.DistanceGrid.from_points(cloud, 0.1, bounds=bounds).values)


def test_depth_fusion(device):
    k = torch.tensor([[40.0, 0.0, 31.5], [0.0, 40.0, 23.5], [0.0, 0.0, 1.0]]).to(device)
    pose = torch.tensor([0.0, 0.0, -0.4, 1.0, 0.0, 0.0, 0.0]).to(device)
    depth = 0.9 + 0.1 * torch.rand(48, 64, device=device)
    fusion = warpgeo.DepthFusion(((-0.5, -0.5, 0.0), (0.5, 0.5, 0.8)), 0.05, device=device)

    def fuse():
        fusion.integrate(depth, k, pose)
        return fusion.distance_grid().values

    if device.type == "cuda":
        _assert_sync_free(fuse)
        return
    # the CPU algorithm lists the marked blocks on the host (a CPU tensor: no device to wait for): one
    # read, by design; CUDA's (a thread per block) runs on CPU tensors with none
    with warpgeo.value_checks(False):
        fuse()
        with pytest.raises(HostReadError), no_host_reads() as harness:
            fuse()
    assert harness.reads == ["torch.Tensor.numpy"], harness.reads
    _warp.PATHS.cuda_on_cpu = True
    try:
        _assert_sync_free(fuse)
    finally:
        _warp.PATHS.cuda_on_cpu = False


#: every op -> the test above that runs it (forward and, for a backward op, its forward's gradient)
COVERS = {
    "warpgeo::farthest_point_sampling": test_fps,
    "warpgeo::gather_points": test_gather,
    "warpgeo::gather_points_backward": test_gather,
    "warpgeo::gather_points_weighted": test_gather_weighted,
    "warpgeo::gather_points_weighted_backward": test_gather_weighted,
    "warpgeo::sphere_mesh_cost": test_sphere_mesh_cost,
    "warpgeo::swept_sphere_mesh_cost": test_swept_sphere_mesh_cost,
    "warpgeo::signed_distance": test_signed_distance,
    "warpgeo::sphere_collision": test_sphere_collision,
    "warpgeo::closest_point": test_closest_point,
    "warpgeo::knn": test_knn,
    "warpgeo::ball_query": test_ball_query,
    "warpgeo::chamfer_distance": test_chamfer,
    "warpgeo::chamfer_distance_backward": test_chamfer,
    "warpgeo::self_collision_cost": test_self_collision,
    "warpgeo::self_collision_cost_backward": test_self_collision,
    "warpgeo::forward_kinematics": test_robot_spheres_and_link_poses,
    "warpgeo::forward_kinematics_backward": test_robot_spheres_and_link_poses,
    "warpgeo::raycast": test_raycast,
    "warpgeo::distance_grid_query": test_distance_grid_query,
    "warpgeo::distance_grid_from_occupancy": test_distance_grid_builders,
    "warpgeo::distance_grid_from_points": test_distance_grid_builders,
    "warpgeo::depth_fusion_integrate": test_depth_fusion,
    "warpgeo::depth_fusion_distance": test_depth_fusion,
}


def test_every_op_is_covered():
    assert_covers_every_op(COVERS, "test_sync_free")


def test_every_custom_op_is_declared_by_Op():
    """``torch.ops.warpgeo`` holds exactly the ops :class:`warpgeo._op.Op` declared (what the suites read)."""
    warpgeo.load_ops()
    registered = {f"warpgeo::{n}" for n in dir(torch.ops.warpgeo) if not n.startswith("_") and n != "name"}
    assert registered == set(_op.REGISTRY)


_UNCOVERED = iter(range(1_000_000))


def test_the_coverage_check_names_a_new_op():
    """The check above can fail: an op declared and covered by no case is named."""

    def impl(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    name = f"warpgeo_selftest::uncovered_{next(_UNCOVERED)}"
    _op.Op(name, check=lambda x: None, impl=impl, fake=lambda x: torch.empty_like(x))
    try:
        with pytest.raises(AssertionError, match=f"no case covers .*{name.split('::')[1]}"):
            assert_covers_every_op(COVERS, "test_sync_free")
        with pytest.raises(AssertionError, match=r"ops that do not exist: \['warpgeo::nothing'\]"):
            assert_covers_every_op({*COVERS, name, "warpgeo::nothing"}, "test_sync_free")
    finally:
        del _op.REGISTRY[name]


def test_world_updates(device):
    world = _world(device)
    poses = world.poses.clone()
    poses[0, 1, :3] += torch.tensor([0.1, 0.0, 0.0], dtype=poses.dtype, device=device)
    mask = torch.tensor([[True, False], [True, False]], device=device)
    with warpgeo.value_checks(False):
        world.set_poses(poses)
        world.set_enabled(mask)
        with no_host_reads():
            world.set_poses(poses)
            world.set_poses(poses[:, :, :].float())
            world.set_enabled(mask)
            world.set_enabled(mask.int())
    torch.testing.assert_close(world.poses, poses)
    assert world.enabled.tolist() == [[True, False], [True, False]]


def test_set_grid(device):
    """MeshWorld.set_grid with checks off: no host read (a grid entry, by name and by index, then queried)."""
    grid = warpgeo.DistanceGrid(torch.rand(5, 4, 3, device=device) - 0.5, 0.1)
    world = warpgeo.MeshWorld({"map": grid, "ball": warpgeo.Sphere(0.1)}, device=device)
    values = torch.rand(5, 4, 3, device=device)
    points = torch.rand(1, 20, 3, device=device) * 0.4
    with warpgeo.value_checks(False):
        world.set_grid("map", values)
        with no_host_reads():
            world.set_grid("map", values)
            world.set_grid(0, values.double())
    got = warpgeo.signed_distance(points, world)
    want = torch.minimum(warpgeo.DistanceGrid(values, 0.1).query(points).distance, points.norm(dim=-1) - 0.1)
    torch.testing.assert_close(got, want)


# --------------------------------------------------------------------------------------------------------
# checks on: the documented errors, and the reads that make them
# --------------------------------------------------------------------------------------------------------


def _bad_calls(device):
    world = _world(device)
    points = torch.rand(2, 30, 3, device=device)
    nan_points = points.clone()
    nan_points[1, 4, 2] = float("nan")
    features = torch.randn(2, 3, 10, device=device)
    spheres = _spheres((2, 5), device)
    nan_spheres = spheres.clone()
    nan_spheres[0, 1, 0] = float("inf")
    bad_pose = world.poses.clone()
    bad_pose[0, 0, 3:] = torch.tensor([2.0, 0.0, 0.0, 0.0], dtype=bad_pose.dtype, device=device)
    return {
        "fps NaN points": (ValueError, lambda: warpgeo.farthest_point_sampling(nan_points, 4)),
        "fps lengths > N": (
            ValueError,
            lambda: warpgeo.farthest_point_sampling(points, 4, lengths=torch.tensor([30, 31], device=device)),
        ),
        "gather idx >= N": (
            IndexError,
            lambda: warpgeo.gather_points(features, torch.tensor([[0, 10], [1, 2]], device=device)),
        ),
        "gather idx < -1": (
            IndexError,
            lambda: warpgeo.gather_points(features, torch.tensor([[0, 1], [-2, 2]], device=device)),
        ),
        "cost inf spheres": (ValueError, lambda: warpgeo.sphere_mesh_cost(nan_spheres, world)),
        "cost env_index": (
            IndexError,
            lambda: warpgeo.sphere_mesh_cost(spheres, world, env_index=torch.tensor([0, 2], device=device)),
        ),
        "swept inf spheres": (ValueError, lambda: warpgeo.swept_sphere_mesh_cost(nan_spheres[None], world)),
        "signed_distance NaN": (ValueError, lambda: warpgeo.signed_distance(nan_points, world)),
        "set_poses quaternion": (ValueError, lambda: world.set_poses(bad_pose)),
        "raycast zero direction": (
            ValueError,
            lambda: warpgeo.raycast(world, points, torch.zeros_like(points)),
        ),
    }


_BAD_CALLS = [
    "fps NaN points",
    "fps lengths > N",
    "gather idx >= N",
    "gather idx < -1",
    "cost inf spheres",
    "cost env_index",
    "swept inf spheres",
    "signed_distance NaN",
    "set_poses quaternion",
    "raycast zero direction",
]


@pytest.mark.parametrize("case", _BAD_CALLS)
def test_checks_on_raise(device, case):
    """Checks on (explicitly, and by default after a checks-off block) raise the documented errors."""
    error, call = _bad_calls(device)[case]
    with warpgeo.value_checks(True), pytest.raises(error):
        call()
    with warpgeo.value_checks(False):
        pass
    with pytest.raises(error):
        call()


@pytest.mark.parametrize("case", _BAD_CALLS)
def test_checks_on_read_the_host(device, case):
    """The value checks are what the harness catches: with checks on, the same calls read the host before
    they fail (so the checks-off tests above would notice a check left on)."""
    _error, call = _bad_calls(device)[case]
    with warpgeo.value_checks(True), pytest.raises(HostReadError), no_host_reads():
        call()


def test_set_value_checks(device):
    features = torch.randn(1, 2, 5, device=device)
    idx = torch.tensor([[0, 4]], device=device)
    warpgeo.gather_points(features, idx)  # warm-up
    try:
        warpgeo.set_value_checks(False)
        with no_host_reads():
            warpgeo.gather_points(features, idx)
        warpgeo.set_value_checks(True)
        with pytest.raises(HostReadError), no_host_reads():
            warpgeo.gather_points(features, idx)
    finally:
        warpgeo.set_value_checks(True)
