"""collision_pairs / self_collision_cost / compat.curobo.load_robot_spheres: against brute force (pairs, the
three reductions, dtypes, gradients), coincident centres, disabled spheres, margins, ties, a large batch,
refused and hostile pairs, the custom-op contract, launches, memory, and cuRobo-style robot configurations."""

from __future__ import annotations

import doctest
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from reference import collision_pairs_reference, self_collision_reference

import warpgeo
from warpgeo import _launch, self_collision
from warpgeo.compat.curobo import RobotSpheres, load_robot_spheres
from warpgeo.self_collision import collision_pairs, self_collision_cost

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
REDUCTIONS = ["max", "sum", None]


def _arm(num_links: int = 5, per_link: int = 4) -> list[int]:
    """The link of each sphere of a toy arm: ``per_link`` spheres on each of ``num_links`` links."""
    return [link for link in range(num_links) for _ in range(per_link)]


def _spheres(lead, count, *, dtype=torch.float64, device="cpu", seed=0, spread=0.6, radius=(0.05, 0.2)):
    """Random spheres ``(*lead, count, 4)``: centres in a cube of side ``spread``, radii in ``radius``."""
    gen = torch.Generator().manual_seed(seed)
    centres = (torch.rand(*lead, count, 3, generator=gen, dtype=torch.float64) - 0.5) * spread
    radii = radius[0] + (radius[1] - radius[0]) * torch.rand(
        *lead, count, 1, generator=gen, dtype=torch.float64
    )
    return torch.cat([centres, radii], dim=-1).to(device=device, dtype=dtype)


def _pairs(links, device="cpu", dtype=torch.int64):
    return collision_pairs(links).to(device=device, dtype=dtype)


# --------------------------------------------------------------------------------------------------------
# collision_pairs
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "links",
    [[0, 0, 1, 1, 2], _arm(7, 9), [3, 1, 3, 0, 2, 1, 0], [0], [], [4, 4, 4], list(range(6))],
)
def test_collision_pairs_matches_brute_force(links):
    got = collision_pairs(links)
    assert got.dtype == torch.int64 and got.shape == (len(collision_pairs_reference(links)), 2)
    assert got.tolist() == collision_pairs_reference(links)
    if len(got):
        assert (got[:, 0] < got[:, 1]).all()


def test_collision_pairs_ignore_forms_agree_and_are_symmetric():
    links = [0, 0, 1, 2, 2, 3, 4, 4]
    names = ["base", "shoulder", "elbow", "wrist", "hand"]
    ref = collision_pairs_reference(links, [(0, 1), (2, 1), (4, 3)])
    as_pairs = collision_pairs(links, ignore=[(0, 1), (2, 1), (4, 3)])
    as_mapping = collision_pairs(links, ignore={0: [1], 1: [2], 3: [4]})
    as_names = collision_pairs(
        links, ignore={"base": ["shoulder"], "elbow": ["shoulder"], "hand": ["wrist"]}, names=names
    )
    as_name_pairs = collision_pairs(
        links, ignore=[("shoulder", "base"), (1, "elbow"), ("wrist", 4)], names=names
    )
    for got in (as_pairs, as_mapping, as_names, as_name_pairs):
        assert got.tolist() == ref
    # a name or link that carries no sphere drops nothing (cuRobo lists such links)
    assert collision_pairs([0, 1], ignore=[(5, 7)]).tolist() == [[0, 1]]
    assert collision_pairs([0, 1], ignore={"c": ["a"]}, names=["a", "b", "c"]).tolist() == [[0, 1]]


def test_collision_pairs_inputs_and_device(device):
    links = torch.tensor([0, 1, 1, 2], dtype=torch.int16, device=device)
    got = collision_pairs(links)
    assert got.device.type == device.type and got.dtype == torch.int64
    assert got.cpu().tolist() == collision_pairs_reference([0, 1, 1, 2])
    assert collision_pairs(np.array([0, 1, 1, 2], dtype=np.int32)).tolist() == got.cpu().tolist()
    assert collision_pairs([]).shape == (0, 2)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"sphere_links": [0.0, 1.0]}, TypeError, "sphere_links"),
        ({"sphere_links": torch.tensor([0.0, 1.0])}, TypeError, "sphere_links"),
        ({"sphere_links": [[0, 1]]}, ValueError, r"sphere_links must have shape \(S,\)"),
        ({"sphere_links": [0, -1]}, ValueError, "sphere_links must be >= 0"),
        ({"sphere_links": [0, 3], "names": ["a", "b"]}, ValueError, "sphere_links must lie in"),
        ({"sphere_links": [0, 1], "ignore": [("a", "b")]}, ValueError, "names="),
        ({"sphere_links": [0, 1], "ignore": [("a", "z")], "names": ["a", "b"]}, ValueError, "'z'"),
        ({"sphere_links": [0, 1], "ignore": [(0, 1, 2)]}, ValueError, "pairs"),
        ({"sphere_links": [0, 1], "ignore": [(0, 1.5)]}, TypeError, "ignore"),
        ({"sphere_links": [0, 1], "ignore": {0: 1}}, TypeError, "ignore"),
        ({"sphere_links": [0, 1], "ignore": [(0, -2)]}, ValueError, "ignore"),
        ({"sphere_links": [0, 1], "names": ["a", "a"]}, ValueError, "unique"),
        ({"sphere_links": [0, 1], "names": "ab"}, TypeError, "names"),
        ({"sphere_links": "01"}, TypeError, "sphere_links"),
    ],
)
def test_collision_pairs_errors(kwargs, error, match):
    links = kwargs.pop("sphere_links")
    with pytest.raises(error, match=match):
        collision_pairs(links, **kwargs)


# --------------------------------------------------------------------------------------------------------
# values
# --------------------------------------------------------------------------------------------------------

# leading dimensions of spheres: one configuration (S, 4), a batch, a batch of trajectories, an empty batch
LEADS = [(), (7,), (3, 5), (0,)]


def _tolerances(dtype):
    return {
        torch.float16: {"rtol": 2e-3, "atol": 2e-3},
        torch.bfloat16: {"rtol": 1e-2, "atol": 1e-2},
        torch.float32: {"rtol": 1e-5, "atol": 1e-6},
        torch.float64: {"rtol": 1e-12, "atol": 1e-14},
    }[dtype]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("lead", LEADS)
def test_cost_matches_brute_force(device, lead, dtype, reduction):
    links = _arm(5, 4)
    spheres = _spheres(lead, len(links), dtype=dtype, device=device, seed=len(lead))
    pairs = _pairs(links, device)
    got = self_collision_cost(spheres, pairs, reduction=reduction)
    ref = self_collision_reference(spheres.double(), pairs, reduction=reduction)
    assert got.dtype == dtype and got.device.type == device.type
    assert got.shape == ref.shape == (*lead, *(() if reduction else (len(pairs),)))
    torch.testing.assert_close(got.double(), ref, **_tolerances(dtype))
    assert (got >= 0).all()
    if spheres.numel():  # the random arm is in collision somewhere: the test can fail
        assert (ref > 0).any()


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_python_loop_reference(reduction):
    """An independent check of the torch reference itself on a few hand-made spheres, by a plain loop."""
    spheres = torch.tensor(
        [
            [0.0, 0, 0, 0.2],
            [0.3, 0, 0, 0.15],
            [0.0, 0.5, 0, 0.1],
            [0.0, 0.52, 0.0, -1.0],
            [0.1, 0.1, 0.1, 0.3],
        ],
        dtype=torch.float64,
    )
    links = [0, 1, 2, 3, 3]
    pairs = collision_pairs(links)
    expected = []
    for i, j in pairs.tolist():
        a, b = spheres[i].tolist(), spheres[j].tolist()
        pen = a[3] + b[3] - math.dist(a[:3], b[:3])
        expected.append(max(pen, 0.0) if a[3] >= 0 and b[3] >= 0 else 0.0)
    want = {"max": max(expected), "sum": sum(expected), None: expected}[reduction]
    got = self_collision_cost(spheres, pairs, reduction=reduction)
    assert got.tolist() == pytest.approx(want, abs=1e-15)
    assert self_collision_reference(spheres, pairs, reduction=reduction).tolist() == pytest.approx(want)


@pytest.mark.parametrize("index", [torch.int32, torch.int64])
def test_int32_and_int64_pairs_agree(device, index):
    links = _arm(4, 3)
    spheres = _spheres((6,), len(links), device=device)
    want = self_collision_cost(spheres, _pairs(links, device), reduction=None)
    got = self_collision_cost(spheres, _pairs(links, device, index), reduction=None)
    assert torch.equal(got, want)


def test_strided_inputs(device):
    """Pairs with a strided last dimension, every other sphere, coordinates not adjacent, a strided margin."""
    links = _arm(4, 3)
    pairs = _pairs(links, device).t().contiguous().t()
    assert pairs.stride(-1) != 1
    wide = _spheres((5,), 2 * len(links), device=device)[:, ::2]
    spread = torch.zeros(5, len(links), 4, 2, dtype=torch.float64, device=device)
    spread[..., 0] = wide
    spheres = spread[..., 0]
    assert spheres.stride(-1) == 2 and wide.stride(-2) == 8
    margin = torch.rand(2 * len(links), dtype=torch.float64, device=device)[::2] * 0.05
    for s in (wide, spheres):
        for reduction in REDUCTIONS:
            got = self_collision_cost(s, pairs, margin=margin, reduction=reduction)
            ref = self_collision_reference(s, pairs, margin=margin, reduction=reduction)
            torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_margin_float_and_tensor(device, reduction):
    links = _arm(4, 3)
    spheres = _spheres((5,), len(links), device=device, seed=3)
    pairs = _pairs(links, device)
    per_sphere = torch.linspace(-0.02, 0.05, len(links), dtype=torch.float64, device=device)
    for margin in (0.03, -0.01, per_sphere, torch.tensor(0.02, dtype=torch.float64, device=device)):
        got = self_collision_cost(spheres, pairs, margin=margin, reduction=reduction)
        ref = self_collision_reference(spheres, pairs, margin=margin, reduction=reduction)
        torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-14)
    # a float32 margin tensor with float64 spheres (and the other way round) is fine
    got = self_collision_cost(spheres.float(), pairs, margin=per_sphere, reduction=reduction)
    ref = self_collision_reference(spheres, pairs, margin=per_sphere, reduction=reduction)
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-6)


def test_disabled_spheres_contribute_nothing(device):
    """A negative radius disables a sphere whatever the margin: cuRobo's attached-object slots (radius -10 at
    the link's origin) sit on top of other spheres and never collide."""
    links = [0, 0, 1, 1, 2, 2, 2]
    spheres = torch.tensor(
        [
            [0.0, 0, 0, 0.1],
            [0.0, 0, 0.1, 0.1],
            [0.0, 0, 0.15, 0.1],  # overlaps sphere 1 by 0.15
            [0.5, 0, 0, 0.1],
            [0.0, 0, 0, -10.0],  # disabled, on top of sphere 0
            [0.0, 0, 0.1, -1e-6],  # disabled
            [0.5, 0, 0, -10.0],  # disabled, on top of sphere 3
        ],
        device=device,
        requires_grad=True,
    )
    pairs = collision_pairs(links).to(device)
    for reduction in REDUCTIONS:
        got = self_collision_cost(spheres, pairs, margin=100.0, reduction=reduction)
        ref = self_collision_reference(spheres.detach(), pairs, margin=100.0, reduction=reduction)
        torch.testing.assert_close(got.detach(), ref)
        got.sum().backward()
        assert (spheres.grad[4:] == 0).all(), spheres.grad
        spheres.grad = None
    per_pair = self_collision_cost(spheres, pairs, reduction=None)
    hits = {tuple(p) for p, v in zip(pairs.tolist(), per_pair.tolist(), strict=True) if v > 0}
    assert hits == {(0, 2), (1, 2)}


def test_ties_go_to_the_lowest_pair_and_the_gradient_through_it_only(device):
    # three spheres on three links in a row, equally spaced: pairs (0, 1) and (1, 2) penetrate equally
    spheres = torch.tensor(
        [[0.0, 0, 0, 0.3], [0.5, 0, 0, 0.3], [1.0, 0, 0, 0.3]], dtype=torch.float64, device=device
    ).requires_grad_()
    pairs = collision_pairs([0, 1, 2]).to(device)  # (0, 1), (0, 2), (1, 2)
    cost = self_collision_cost(spheres, pairs)
    assert cost.item() == pytest.approx(0.1)
    cost.backward()
    # d/dc_0 = -(c_0 - c_1) / |c_0 - c_1| = +x: sphere 0 moving towards sphere 1 deepens the overlap
    want = torch.tensor([[1.0, 0, 0, 1], [-1.0, 0, 0, 1], [0, 0, 0, 0]], dtype=torch.float64)
    assert torch.equal(spheres.grad.cpu(), want)
    # the same with the pairs listed the other way: the lowest index is then (1, 2)
    spheres.grad = None
    self_collision_cost(spheres, pairs.flip(0)).backward()
    want = torch.tensor([[0.0, 0, 0, 0], [1.0, 0, 0, 1], [-1.0, 0, 0, 1]], dtype=torch.float64)
    assert torch.equal(spheres.grad.cpu(), want)


def test_no_pairs_no_spheres_and_padding(device):
    spheres = _spheres((4,), 5, device=device)
    empty = torch.empty(0, 2, dtype=torch.int64, device=device)
    assert torch.equal(
        self_collision_cost(spheres, empty), torch.zeros(4, dtype=spheres.dtype, device=device)
    )
    assert self_collision_cost(spheres, empty, reduction=None).shape == (4, 0)
    none = torch.empty(4, 0, 4, device=device)
    assert torch.equal(self_collision_cost(none, empty, reduction="sum"), torch.zeros(4, device=device))
    # -1 is padding, a pair (i, i) is no pair: both contribute 0
    pairs = torch.tensor([[0, 1], [-1, 2], [3, -1], [-1, -1], [2, 2]], device=device)
    got = self_collision_cost(spheres, pairs, reduction=None)
    ref = self_collision_reference(spheres, pairs, reduction=None)
    torch.testing.assert_close(got, ref)
    assert (got[:, 1:] == 0).all()


def test_200k_configurations(device):
    """A large batch of a small arm against the reference (one thread per configuration, split on the CPU)."""
    links = _arm(4, 2)
    spheres = _spheres((200_000,), len(links), dtype=torch.float32, device=device, seed=5)
    pairs = _pairs(links, device, torch.int32)
    ref = self_collision_reference(spheres.double(), pairs, reduction=None)
    for reduction in REDUCTIONS:
        got = self_collision_cost(spheres, pairs, reduction=reduction)
        want = {"max": ref.amax(-1), "sum": ref.sum(-1), None: ref}[reduction]
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=2e-6)
    assert 0.1 < (ref.amax(-1) > 0).double().mean() < 0.99  # a mix of free and colliding configurations


# --------------------------------------------------------------------------------------------------------
# gradients
# --------------------------------------------------------------------------------------------------------


def _clear_of_kinks(spheres, pairs, margin=0.0, gap=1e-3):
    """True when no penetration lies within ``gap`` of 0 and every configuration's largest penetration
    leads the next by ``gap`` (finite differences never cross the clamp or change the arg-max)."""
    pen = self_collision_reference(spheres, pairs, margin=margin, reduction=None)
    raw = pen  # clamped values: look at the unclamped ones too
    centres, radii = spheres[..., :3], spheres[..., 3] + margin
    i, j = pairs[:, 0], pairs[:, 1]
    raw = radii[..., i] + radii[..., j] - (centres[..., i, :] - centres[..., j, :]).norm(dim=-1)
    if (raw.abs() < gap).any():
        return False
    top = pen.topk(2, dim=-1).values
    return bool(((top[..., 0] - top[..., 1]) > gap).all() and (top[..., 0] > gap).all())


def _gradcheck_inputs(device, *, with_margin=False):
    links = [0, 0, 1, 1, 2, 3]
    pairs = _pairs(links, device)
    for seed in range(200):
        spheres = _spheres((3,), len(links), device=device, seed=seed, spread=0.5)
        margin = torch.linspace(0.01, 0.03, len(links), dtype=torch.float64, device=device)
        if _clear_of_kinks(spheres, pairs, margin if with_margin else 0.0):
            return spheres, pairs, margin
    raise AssertionError("no random arm clear of kinks")


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_gradcheck(device, reduction):
    spheres, pairs, margin = _gradcheck_inputs(device, with_margin=True)
    spheres.requires_grad_()
    margin.requires_grad_()

    def cost(s, m):
        return self_collision_cost(s, pairs, margin=m, reduction=reduction)

    assert torch.autograd.gradcheck(cost, (spheres, margin))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_backward_matches_reference_autograd(device, reduction, dtype):
    links = _arm(6, 5)
    pairs = _pairs(links, device)
    spheres = _spheres((4, 3), len(links), dtype=dtype, device=device, seed=11)
    margin = torch.rand(len(links), dtype=dtype, device=device) * 0.02
    upstream_shape = (4, 3) if reduction else (4, 3, len(pairs))
    upstream = torch.randn(upstream_shape, dtype=dtype, device=device)
    grads = []
    for fn in (self_collision_cost, self_collision_reference):
        s, m = spheres.clone().requires_grad_(), margin.clone().requires_grad_()
        fn(s, pairs, margin=m, reduction=reduction).backward(upstream)
        grads.append((s.grad, m.grad))
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-12}
    for got, want in zip(*grads, strict=True):
        torch.testing.assert_close(got, want, **tol)
    assert grads[0][0].abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_gradients(device, dtype):
    links = _arm(4, 3)
    pairs = _pairs(links, device)
    spheres = _spheres((5,), len(links), dtype=dtype, device=device, seed=2)
    s = spheres.clone().requires_grad_()
    self_collision_cost(s, pairs, reduction="sum").sum().backward()
    ref = spheres.double().requires_grad_()
    self_collision_reference(ref, pairs, reduction="sum").sum().backward()
    assert s.grad.dtype == dtype
    torch.testing.assert_close(s.grad.double(), ref.grad, rtol=2e-2, atol=2e-2)


def test_coincident_centres_have_a_fixed_finite_gradient(device):
    """|c_i - c_j| has no gradient at 0 (torch's norm gives 0 there, or NaN through sqrt of the squares: two
    spheres on top of each other would never part): the op takes the direction +x, documented."""
    spheres = torch.tensor([[0.2, 0.3, 0.4, 0.1], [0.2, 0.3, 0.4, 0.2], [5.0, 0, 0, 0.1]], device=device)
    pairs = collision_pairs([0, 1, 2]).to(device)
    for reduction in REDUCTIONS:
        s = spheres.clone().requires_grad_()
        cost = self_collision_cost(s, pairs, reduction=reduction)
        assert cost.flatten()[0].item() == pytest.approx(0.3)
        cost.sum().backward()
        assert torch.isfinite(s.grad).all()
        want = torch.tensor([[-1.0, 0, 0, 1], [1.0, 0, 0, 1], [0, 0, 0, 0]], device=device)
        assert torch.equal(s.grad, want), s.grad


def test_far_and_tiny_scales_are_finite(device):
    """No overflow of the squared distance (float32 spheres 1e20 apart) and no underflow (1e-25 apart)."""
    far = torch.tensor([[0.0, 0, 0, 6e19], [1e20, 0, 0, 6e19]], device=device, requires_grad=True)
    pairs = collision_pairs([0, 1]).to(device)
    cost = self_collision_cost(far, pairs)
    assert cost.item() == pytest.approx(2e19, rel=1e-5)
    cost.backward()
    assert far.grad[0].tolist() == [1.0, 0.0, 0.0, 1.0]
    tiny = torch.tensor([[0.0, 0, 0, 3e-25], [0.0, 4e-25, 3e-25, 3e-25]], device=device)
    assert self_collision_cost(tiny, pairs).item() == pytest.approx(1e-25, rel=1e-4)


def test_no_grad_needed_gives_no_graph(device):
    spheres = _spheres((2,), 6, device=device).requires_grad_()
    pairs = _pairs([0, 0, 1, 1, 2, 2], device)
    with torch.no_grad():
        assert not self_collision_cost(spheres, pairs).requires_grad
    # only the margin wants a gradient
    margin = torch.full((6,), 0.01, dtype=torch.float64, device=device, requires_grad=True)
    cost = self_collision_cost(spheres.detach(), pairs, margin=margin, reduction="sum")
    cost.sum().backward()
    assert margin.grad is not None and margin.grad.abs().sum() > 0


# --------------------------------------------------------------------------------------------------------
# launches and memory
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_one_launch_forward_one_backward(monkeypatch, reduction):
    links = _arm(5, 4)
    pairs = _pairs(links)
    spheres = _spheres((300,), len(links), dtype=torch.float32).requires_grad_()
    self_collision_cost(spheres, pairs, reduction=reduction).sum().backward()  # modules loaded
    launched = []
    real_run = _launch.run

    def watch(kernel, dims, device, block_dim, args):
        launched.append(kernel.key)
        return real_run(kernel, dims, device, block_dim, args)

    monkeypatch.setattr(_launch, "run", watch)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)  # one CPU thread: one launch per call
    cost = self_collision_cost(spheres, pairs, reduction=reduction)
    assert len(launched) == 1 and "backward" not in launched[0], launched
    cost.sum().backward()
    assert len(launched) == 2 and "backward" in launched[1], launched


_MEMORY_SCRIPT = textwrap.dedent(
    """
    import resource, torch, warpgeo
    b, s = 50_000, 60
    links = [k * 7 // s for k in range(s)]                      # a 60-sphere, 7-link arm
    pairs = warpgeo.collision_pairs(links)
    spheres = torch.rand(b, s, 4)
    spheres[..., 3] *= 0.1
    spheres.requires_grad_()
    warpgeo.self_collision_cost(spheres[:4], pairs).sum().backward()   # kernels loaded, allocator warm
    spheres.grad = None
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for reduction in ("max", "sum"):
        warpgeo.self_collision_cost(spheres, pairs, reduction=reduction).sum().backward()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(len(pairs), (after - before) * 1024)
    """
)


def test_memory_is_o_batch():
    """50k configurations x ~1,500 pairs: a (B, P, 3) float32 temporary is 0.9 GB; the op's memory is its
    gradient (B, S, 4), 48 MB. Run in a fresh process so that its peak resident size measures these calls."""
    out = subprocess.run(
        [sys.executable, "-c", _MEMORY_SCRIPT], capture_output=True, text=True, timeout=300, check=True
    )
    num_pairs, grown = (int(x) for x in out.stdout.split())
    assert num_pairs > 1400
    assert grown < 160 * 2**20, f"peak memory grew by {grown / 2**20:.0f} MiB"


# --------------------------------------------------------------------------------------------------------
# the custom-op contract
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", ["max", "sum", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_opcheck(dtype, reduction):
    links = _arm(4, 3)
    pairs = _pairs(links)
    spheres = _spheres((3,), len(links), dtype=dtype, seed=1)
    margin = torch.full((len(links),), 0.01, dtype=dtype)
    for m, value in ((None, 0.02), (margin.requires_grad_(), 0.0)):
        torch.library.opcheck(
            torch.ops.warpgeo.self_collision_cost,
            (spheres.clone().requires_grad_(), pairs, m, value, reduction),
        )
    cost, arg = torch.ops.warpgeo.self_collision_cost(spheres, pairs, None, 0.0, reduction)
    torch.library.opcheck(
        torch.ops.warpgeo.self_collision_cost_backward,
        (torch.ones_like(cost), spheres, pairs.int(), margin.detach(), 0.0, reduction, arg),
    )


def test_compile_fullgraph_matches_eager(device):
    links = _arm(5, 3)
    pairs = _pairs(links, device)
    spheres = _spheres((4, 2), len(links), dtype=torch.float32, device=device, seed=4)
    margin = torch.full((len(links),), 0.01, device=device)

    def fn(s, m):
        worst = self_collision_cost(s, pairs, margin=m)
        total = self_collision_cost(s, pairs, reduction="sum")
        each = self_collision_cost(s, pairs, margin=0.02, reduction=None)
        return worst.sum() + 0.5 * total.sum() + each.square().sum()

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    results = []
    for f in (fn, compiled):
        s, m = spheres.clone().requires_grad_(), margin.clone().requires_grad_()
        loss = f(s, m)
        loss.backward()
        results.append((loss.detach(), s.grad, m.grad))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b)


def test_no_host_reads_with_checks_off(device):
    from test_sync_free import _assert_sync_free

    links = _arm(4, 3)
    pairs = _pairs(links, device)
    spheres = _spheres((2, 3), len(links), dtype=torch.float32, device=device).requires_grad_()
    margin = torch.full((len(links),), 0.01, device=device, requires_grad=True)
    for reduction in REDUCTIONS:
        _assert_sync_free(
            lambda r=reduction: self_collision_cost(spheres, pairs, margin=margin, reduction=r),
            leaves=[spheres, margin],
        )


# --------------------------------------------------------------------------------------------------------
# errors, value checks, hostile input
# --------------------------------------------------------------------------------------------------------


def _calls(spheres, pairs, margin=None, reduction="max"):
    """The public function and the op, on the same (possibly bad) input."""
    op_spheres = spheres if not isinstance(spheres, torch.Tensor) or spheres.dim() != 2 else spheres[None]
    return [
        lambda: self_collision_cost(
            spheres, pairs, margin=0.0 if margin is None else margin, reduction=reduction
        ),
        lambda: torch.ops.warpgeo.self_collision_cost(
            op_spheres, pairs, margin, 0.0, "none" if reduction is None else reduction
        ),
    ]


@pytest.mark.parametrize(
    ("case", "error", "match"),
    [
        ("pair_too_big", IndexError, r"pairs must lie in \[0, S=6\)"),
        ("pair_negative", IndexError, r"pairs must lie in \[0, S=6\).*-2"),
        ("pair_huge", IndexError, "pairs"),
        ("pairs_float", TypeError, "pairs must have dtype"),
        ("pairs_shape", ValueError, r"pairs must have shape \(P, 2\)"),
        ("spheres_3", ValueError, "spheres must have shape"),
        ("spheres_int", TypeError, "spheres must have dtype"),
        ("nan_sphere", ValueError, "spheres must be finite"),
        ("inf_radius", ValueError, "spheres must be finite"),
        ("margin_shape", ValueError, r"margin must have shape \(6,\)"),
        ("margin_int", TypeError, "margin must have dtype"),
        ("margin_nan", ValueError, "margin must be finite"),
        ("device", ValueError, "same device"),
    ],
)
def test_errors_from_public_function_and_op(case, error, match):
    spheres = _spheres((2,), 6, dtype=torch.float32)
    pairs = _pairs([0, 0, 1, 1, 2, 2])
    margin = None
    if case == "pair_too_big":
        pairs[3, 1] = 6
    elif case == "pair_negative":
        pairs[0, 0] = -2
    elif case == "pair_huge":
        pairs[1, 0] = 2**40
    elif case == "pairs_float":
        pairs = pairs.float()
    elif case == "pairs_shape":
        pairs = pairs[:, :1]
    elif case == "spheres_3":
        spheres = spheres[..., :3]
    elif case == "spheres_int":
        spheres = spheres.long()
    elif case == "nan_sphere":
        spheres[1, 2, 0] = float("nan")
    elif case == "inf_radius":
        spheres[0, 4, 3] = float("inf")
    elif case == "margin_shape":
        margin = torch.zeros(5)
    elif case == "margin_int":
        margin = torch.zeros(6, dtype=torch.int64)
    elif case == "margin_nan":
        margin = torch.full((6,), float("nan"))
    elif case == "device":
        margin = torch.zeros(6, device="meta")
    for call in _calls(spheres, pairs, margin):
        with pytest.raises(error, match=match):
            call()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"reduction": "mean"}, ValueError, "reduction"),
        ({"margin": float("nan")}, ValueError, "margin must be finite"),
        ({"margin": 10**400}, ValueError, "margin must be finite"),
        ({"margin": "0.1"}, TypeError, "margin"),
        ({"margin": True}, TypeError, "margin"),
    ],
)
def test_bad_options(kwargs, error, match):
    spheres = _spheres((2,), 4)
    with pytest.raises(error, match=match):
        self_collision_cost(spheres, _pairs([0, 1, 2, 3]), **kwargs)


def test_bad_spheres_shape_from_public_function():
    with pytest.raises(ValueError, match=r"spheres must have shape \(\.\.\., S, 4\)"):
        self_collision_cost(torch.rand(4), _pairs([0, 1]))
    with pytest.raises(TypeError, match=r"spheres must be a torch\.Tensor"):
        self_collision_cost([[0.0, 0, 0, 1]], _pairs([0, 1]))


@pytest.mark.parametrize("index", [torch.int32, torch.int64])
def test_hostile_pairs_with_checks_off_never_crash(device, index):
    links = _arm(3, 2)
    spheres = _spheres((4,), len(links), dtype=torch.float32, device=device).requires_grad_()
    good = _pairs(links, device, index)
    big = 2**31 - 1 if index == torch.int32 else 2**40 + 1
    hostile = torch.tensor(
        [[0, 6], [-5, 1], [big, 2], [3, -(2**31) if index == torch.int32 else -(2**62)], [7, 7], [-1, 4]],
        dtype=index,
        device=device,
    )
    mixed = torch.cat([good, hostile])[torch.randperm(len(good) + len(hostile))]
    keep = torch.tensor([p in good.tolist() for p in mixed.tolist()], device=device)
    with warpgeo.value_checks(False):
        for reduction in REDUCTIONS:
            got = self_collision_cost(spheres, mixed, reduction=reduction)
            got.sum().backward()
            assert torch.isfinite(spheres.grad).all()
            spheres.grad = None
            # the hostile pairs are skipped: the good ones give what they give alone
            per_pair = self_collision_cost(spheres, mixed, reduction=None)
            assert (per_pair[:, ~keep] == 0).all()
            want = self_collision_reference(
                spheres.detach(),
                mixed.clamp(-1, len(links) - 1).where(keep[:, None], -1),
                reduction=reduction,
            )
            torch.testing.assert_close(got.detach(), want)
        # NaN / inf spheres: garbage in, no crash
        bad = spheres.detach().clone()
        bad[0, 0] = float("nan")
        bad[1, 2, 3] = float("inf")
        self_collision_cost(bad, good)
        # the ops directly, with inconsistent saved tensors
        cost, arg = torch.ops.warpgeo.self_collision_cost(spheres.detach(), mixed, None, 0.0, "max")
        torch.ops.warpgeo.self_collision_cost_backward(
            torch.ones_like(cost), spheres.detach(), mixed, None, 0.0, "max", arg.fill_(10**6)
        )
        torch.ops.warpgeo.self_collision_cost_backward(
            torch.ones_like(cost), spheres.detach(), mixed, None, 0.0, "max", arg.fill_(-7)
        )
    with pytest.raises(IndexError, match="pairs"):
        self_collision_cost(spheres, mixed)


def test_docstring_examples_run():
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    names = {"torch": torch, "collision_pairs": collision_pairs, "self_collision_cost": self_collision_cost}
    for test in finder.find(self_collision, "warpgeo.self_collision", globs=names):
        runner.run(test, clear_globs=True)
    results = runner.summarize(verbose=False)
    assert results.failed == 0 and results.attempted >= 6


# --------------------------------------------------------------------------------------------------------
# compat.curobo.load_robot_spheres: small configurations in cuRobo's format, written here
# --------------------------------------------------------------------------------------------------------

_SPHERES = {
    "base": [{"center": [0.0, 0.0, 0.05], "radius": 0.08}, {"center": [0.0, 0.0, 0.15], "radius": 0.06}],
    "upper": [{"center": [0.0, 0.0, 0.0], "radius": 0.05}, {"center": [0.2, 0.0, 0.0], "radius": 0.05}],
    "lower": [{"center": [0.0, 0.0, 0.0], "radius": 0.04}],
    "hand": [{"center": [0.0, 0.0, 0.02], "radius": 0.03}],
}


def _kinematics(**extra):
    return {
        "urdf_path": "robot/toy.urdf",  # not read
        "base_link": "base",
        "collision_spheres": _SPHERES,
        "self_collision_ignore": {"base": ["upper"], "upper": ["lower"], "lower": ["hand", "tool"]},
        "self_collision_buffer": {"base": 0.02, "hand": 0.01, "tool": 0.5},
        "cspace": {"joint_names": ["j1", "j2", "j3"]},
        **extra,
    }


def _check_toy(robot: RobotSpheres, *, extra: int = 0):
    assert isinstance(robot, RobotSpheres)
    assert robot.link_names[:4] == ["base", "upper", "lower", "hand"]
    links = [0, 0, 1, 1, 2, 3] + [4] * extra
    assert robot.sphere_links.tolist() == links and robot.sphere_links.dtype == torch.int64
    assert robot.local_spheres.shape == (6 + extra, 4) and robot.local_spheres.dtype == torch.float32
    assert robot.local_spheres[3].tolist() == pytest.approx([0.2, 0.0, 0.0, 0.05])
    assert (robot.local_spheres[6:, 3] < 0).all()
    ignored = [(0, 1), (1, 2), (2, 3)]
    assert robot.pairs.tolist() == collision_pairs_reference(links, ignored)
    assert robot.self_margin.tolist() == pytest.approx([0.02, 0.02, 0, 0, 0, 0.01] + [0.0] * extra)


def test_load_robot_spheres_dict_forms():
    kinematics = _kinematics()
    for config in (kinematics, {"kinematics": kinematics}, {"robot_cfg": {"kinematics": kinematics}}):
        _check_toy(load_robot_spheres(config))


def test_load_robot_spheres_yaml_with_a_spheres_file(tmp_path):
    yaml = pytest.importorskip("yaml")
    (tmp_path / "spheres").mkdir()
    (tmp_path / "spheres" / "toy.yml").write_text(yaml.safe_dump({"collision_spheres": _SPHERES}))
    kinematics = _kinematics(collision_spheres="spheres/toy.yml", extra_collision_spheres={"attached": 3})
    kinematics["collision_link_names"] = ["base", "upper", "lower", "hand", "attached"]
    (tmp_path / "toy.yml").write_text(yaml.safe_dump({"robot_cfg": {"kinematics": kinematics}}))
    robot = load_robot_spheres(tmp_path / "toy.yml")
    _check_toy(robot, extra=3)
    assert robot.link_names == ["base", "upper", "lower", "hand", "attached"]
    # the same as a dict, with the spheres file found from root=
    again = load_robot_spheres({"robot_cfg": {"kinematics": kinematics}}, root=tmp_path)
    for a, b in zip(robot, again, strict=True):
        assert a == b if isinstance(a, list) else torch.equal(a, b)


def test_load_robot_spheres_collision_link_names_select_and_order():
    """cuRobo checks the spheres of ``collision_link_names`` only, in that order (a spheres file may describe
    more links: a hand the arm's configuration leaves out)."""
    robot = load_robot_spheres(_kinematics(collision_link_names=["hand", "base", "upper"]))
    assert robot.link_names == ["hand", "base", "upper"]
    assert robot.sphere_links.tolist() == [0, 1, 1, 2, 2]
    assert robot.local_spheres[0].tolist() == pytest.approx([0.0, 0.0, 0.02, 0.03])
    assert robot.pairs.tolist() == collision_pairs_reference([0, 1, 1, 2, 2], [(1, 2)])


def test_load_robot_spheres_is_curobos_self_collision_check():
    """Posed spheres (here: every link at the origin) through self_collision_cost with the robot's pairs and
    margins equal the brute force with cuRobo's buffers."""
    robot = load_robot_spheres(_kinematics())
    spheres = robot.local_spheres[None].double()
    got = self_collision_cost(spheres, robot.pairs, margin=robot.self_margin, reduction=None)
    ref = self_collision_reference(spheres, robot.pairs, margin=robot.self_margin.double(), reduction=None)
    torch.testing.assert_close(got, ref)
    assert got.max() > 0


@pytest.mark.parametrize("kinematics", [{"collision_spheres": None, "urdf_path": "x"}, {"urdf_path": "x"}])
def test_load_robot_spheres_without_spheres_is_an_error(kinematics):
    """cuRobo's template.yml / simple_mimic_robot.yml say ``collision_spheres: null``: no robot of 0 spheres
    (issue 50 item 8)."""
    with pytest.raises(ValueError, match="collision_spheres"):
        load_robot_spheres({"robot_cfg": {"kinematics": kinematics}})


@pytest.mark.parametrize("reduction", ["max", "sum", None])
@pytest.mark.parametrize("pairs", [np.zeros((0, 2), dtype=np.int64), None])
def test_no_pairs_cost_nothing(reduction, pairs):
    """Issue 50 item 12: pairs of shape (0, 2) (also collision_pairs' own, whose strides are (0, 0)) cost 0
    in every reduction, of the right shape, with a zero gradient."""
    pairs = collision_pairs([0, 0, 0]) if pairs is None else torch.from_numpy(pairs)
    assert pairs.shape == (0, 2)
    spheres = torch.rand(2, 5, 3, 4, dtype=torch.float64, requires_grad=True)
    cost = self_collision_cost(spheres, pairs, reduction=reduction)
    assert cost.shape == ((2, 5) if reduction else (2, 5, 0))
    assert (cost == 0).all()
    cost.sum().backward()
    assert spheres.grad is not None and (spheres.grad == 0).all()
    with pytest.raises(TypeError, match="reduction"):
        self_collision_cost(spheres, pairs, reduction=["max"])
    with pytest.raises(ValueError, match="reduction"):
        torch.ops.warpgeo.self_collision_cost(spheres.reshape(10, 3, 4), pairs, None, 0.0, "mean")


def _write(path, text: str | bytes):
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


_BIG_INT = "1" + "0" * 400  # an int beyond float64's range


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        (f"collision_spheres: {{base: [{{center: [0, 0, 0], radius: {_BIG_INT}}}]}}", ValueError, "radius"),
        (f"collision_spheres: {{base: [{{center: [{_BIG_INT}, 0, 0], radius: 0.1}}]}}", ValueError, "center"),
        ("collision_spheres: {base: [{center: [0, 0, 0], radius: 1.0e+39}]}", ValueError, "radius.*float32"),
        (
            "collision_spheres: {base: [{center: [-1.0e+39, 0, 0], radius: 0.1}]}",
            ValueError,
            "center.*float32",
        ),
        (
            f"collision_spheres: {{base: [{{center: [0, 0, 0], radius: 0.1}}]}}\nself_collision_buffer: {{base: {_BIG_INT}}}",
            ValueError,
            "self_collision_buffer",
        ),
        (
            "collision_spheres: {base: [{center: [0, 0, 0], radius: 0.1}]}\nself_collision_buffer: {base: 1.0e+39}",
            ValueError,
            "self_collision_buffer.*float32",
        ),
        (
            "collision_spheres: {base: [{center: [0, 0, 0], radius: 0.1}]}\nextra_collision_spheres: {base: 10000000000}",
            ValueError,
            "extra_collision_spheres",
        ),
        (
            f"collision_spheres: {{base: [{{center: [0, 0, 0], radius: 0.1}}]}}\nextra_collision_spheres: {{base: {_BIG_INT}}}",
            ValueError,
            "extra_collision_spheres",
        ),
        (
            "collision_spheres: {base: [{center: [0, 0, 0], radius: 0.1}]}\ncollision_link_names: [[base]]",
            TypeError,
            "collision_link_names",
        ),
        ("collision_spheres: self.yml", ValueError, "collision_spheres.*self.yml"),
        (b"collision_spheres: {b\xe4se: []}\n", ValueError, "UTF-8"),
    ],
)
def test_load_robot_spheres_hostile_yaml(tmp_path, config, error, match):
    """Issue 50 item 13: each hostile file is a ValueError / TypeError naming the key, never a
    RecursionError, OverflowError, MemoryError or UnicodeDecodeError."""
    path = _write(tmp_path / "self.yml", config)
    with pytest.raises(error, match=match):
        load_robot_spheres(path)


def test_load_robot_spheres_bad_root(tmp_path):
    with pytest.raises(TypeError, match="root"):
        load_robot_spheres({"collision_spheres": "spheres.yml"}, root=7)


@pytest.mark.parametrize(
    ("spheres", "match"),
    [
        ({"base": [{"radius": 0.1}]}, r"base.*0.*center"),
        ({"base": [{"center": [0, 0], "radius": 0.1}]}, r"base.*0.*center"),
        (
            {"base": [{"center": [0, 0, 0], "radius": 0.1}, {"center": [0, 0, float("nan")], "radius": 0.1}]},
            r"base.*1",
        ),
        ({"base": [{"center": [0, 0, 0]}]}, r"base.*0.*radius"),
        ({"base": [{"center": [0, 0, 0], "radius": "big"}]}, r"base.*0.*radius"),
        ({"base": [[0, 0, 0, 0.1]]}, r"base.*0"),
        ({"base": {"center": [0, 0, 0], "radius": 0.1}}, r"base"),
        ({"base": [{"center": [0, 0, 0], "radius": 0.1, "colour": 1}]}, r"base.*colour"),
    ],
)
def test_load_robot_spheres_malformed_entry_names_link_and_entry(spheres, match):
    with pytest.raises(ValueError, match=match):
        load_robot_spheres({"collision_spheres": spheres})


def test_load_robot_spheres_errors(tmp_path):
    with pytest.raises(TypeError, match="config"):
        load_robot_spheres(42)
    with pytest.raises(ValueError, match="collision_spheres"):
        load_robot_spheres({"robot_cfg": {"world": {}}})
    with pytest.raises(ValueError, match="no such"):
        load_robot_spheres(tmp_path / "missing.yml")
    with pytest.raises(ValueError, match=r"spheres.*missing"):
        load_robot_spheres({"collision_spheres": "spheres/missing.yml"}, root=tmp_path)
    with pytest.raises(ValueError, match="extra_collision_spheres"):
        load_robot_spheres(_kinematics(extra_collision_spheres={"hand": -1}))
    with pytest.raises(ValueError, match=r"collision_link_names.*'elbow'"):
        load_robot_spheres(_kinematics(collision_link_names=["base", "elbow"]))
    with pytest.raises(TypeError, match="self_collision_buffer"):
        load_robot_spheres(_kinematics(self_collision_buffer={"base": "wide"}))
    with pytest.raises(TypeError, match="self_collision_ignore"):
        load_robot_spheres(_kinematics(self_collision_ignore={"base": "upper"}))
