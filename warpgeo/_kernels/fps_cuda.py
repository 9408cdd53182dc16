"""Farthest point sampling on CUDA (tables marked ``cuda_only``: a CPU warmup never compiles them, a first CUDA
call compiles the precision it launches; the CPU test suite runs them through Warp's CPU blocks):

* :func:`fps_strip` (``FPS_STRIP``): one block per cloud, its distances in the lanes' registers, one block
  reduction per step (small clouds, up to ``STRIP * STRIP_BLOCK_DIM`` points; :func:`fps_strip_held`, its
  A/B variant, holds the coordinates in registers too);
* :func:`fps_block` (``FPS_BLOCK``): one block per cloud, its distances in memory, a block-wide arg-max per
  step (clouds too large for the strip design, too small for a group);
* :func:`fps_steps` and :func:`fps_persistent` (``FPS_GRID``): a group of blocks per cloud, the same steps
  separated by kernel boundaries (a launch per step) or by a barrier of the group (one launch, every block
  resident: sized from the device's SMs by ``warpgeo/fps.py``). See "the grid designs" below.
"""

from typing import Any

import warp as wp

from warpgeo._constants import FPS_BLOCK_DIM
from warpgeo._kernels._table import KernelTable
from warpgeo._kernels.fps import (
    CHOSEN,
    FAR,
    NO_POINT,
    OPTIONS,
    SENTINEL_INDEX,
    TYPES,
    begin_row,
    cloud,
    distance_sq,
    fold_loaded,
)


@wp.func
def fold_valid(
    ok: bool,
    d: wp.float64,
    q: wp.vec3d,
    p: wp.vec3d,
    i: int,
    cur: int,
    b: int,
    mindist: wp.array2d(dtype=wp.float64),
):
    """:func:`fold` on a distance and point already loaded: the new distance (stored), or ``CHOSEN`` where
    ``ok`` is False (a lane's slot past the cloud's end)."""
    if not ok:
        return CHOSEN
    return fold_loaded(d, q, p, i, cur, b, mindist)


@wp.func
def scan4(
    points: wp.array2d(dtype=Any),
    mindist: wp.array2d(dtype=wp.float64),
    b: int,
    lo: int,
    hi: int,
    cur: int,
    lane: int,
    nthreads: int,
):
    """:func:`~warpgeo._kernels.fps.scan` of the points ``lo, ..., hi - 1`` (the lane's are ``lo + lane``,
    ``lo + lane + nthreads``, ...), four of the lane's points at a time, their loads issued before any store
    (a lane keeps four loads in flight instead of one: the step is bound by memory latency, not arithmetic).
    Same points, same order within the lane (ascending), so the same candidate."""
    p = wp.vec3d(points[b, cur])
    my_best = CHOSEN
    my_index = NO_POINT
    last = hi - 1
    for i in range(lo + lane, hi, 4 * nthreads):
        i1 = i + nthreads
        i2 = i1 + nthreads
        i3 = i2 + nthreads
        # past the end: load a valid slot (the last point) and ignore it
        j1 = wp.min(i1, last)
        j2 = wp.min(i2, last)
        j3 = wp.min(i3, last)
        d0 = mindist[b, i]
        d1 = mindist[b, j1]
        d2 = mindist[b, j2]
        d3 = mindist[b, j3]
        q0 = wp.vec3d(points[b, i])
        q1 = wp.vec3d(points[b, j1])
        q2 = wp.vec3d(points[b, j2])
        q3 = wp.vec3d(points[b, j3])
        d0 = fold_valid(True, d0, q0, p, i, cur, b, mindist)
        d1 = fold_valid(i1 <= last, d1, q1, p, i1, cur, b, mindist)
        d2 = fold_valid(i2 <= last, d2, q2, p, i2, cur, b, mindist)
        d3 = fold_valid(i3 <= last, d3, q3, p, i3, cur, b, mindist)
        # ascending indices and a strict '>': the lowest index among equal distances
        if d0 > my_best:
            my_best = d0
            my_index = i
        if d1 > my_best:
            my_best = d1
            my_index = i1
        if d2 > my_best:
            my_best = d2
            my_index = i2
        if d3 > my_best:
            my_best = d3
            my_index = i3
    return my_best, my_index


@wp.func
def block_fps(
    points: wp.array2d(dtype=Any),
    lengths: wp.array(dtype=wp.int64),
    num_samples: wp.array(dtype=wp.int64),
    start: wp.array(dtype=wp.int64),
    mindist: wp.array2d(dtype=wp.float64),
    out_index: wp.array2d(dtype=wp.int64),
    out_dist: wp.array2d(dtype=Any),
    b: int,
    lane: int,
    nthreads: int,
):
    """Greedy FPS of the whole of cloud ``b`` by the threads of one block.

    Each step, every lane scans its share of the points; two block reductions (largest distance, then the
    lowest index holding it) pick the next sample.
    """
    n, k, cur = cloud(b, points, lengths, num_samples, start, out_index)
    begin_row(b, lane, nthreads, n, k, mindist, out_index, out_dist)
    best = wp.float64(wp.inf)
    for s in range(k):
        if lane == 0:
            out_index[b, s] = wp.int64(cur)
            out_dist[b, s] = out_dist.dtype(wp.sqrt(best))
        my_best, my_index = scan4(points, mindist, b, 0, n, cur, lane, nthreads)
        best = wp.tile_max(wp.tile(my_best))[0]
        candidate = NO_POINT
        if my_best == best:
            candidate = my_index
        cur = wp.tile_min(wp.tile(candidate))[0]


def fps_block(
    points: wp.array2d(dtype=Any),
    lengths: wp.array(dtype=wp.int64),
    num_samples: wp.array(dtype=wp.int64),
    start: wp.array(dtype=wp.int64),
    mindist: wp.array2d(dtype=wp.float64),
    out_index: wp.array2d(dtype=wp.int64),
    out_dist: wp.array2d(dtype=Any),
):
    """Greedy FPS of cloud ``b`` by the threads of one block (launched tiled, one block per cloud)."""
    b, lane = wp.tid()
    block_fps(points, lengths, num_samples, start, mindist, out_index, out_dist, b, lane, wp.block_dim())


#: ``FPS_BLOCK[precision].fps_block``, launched tiled with ``FPS_BLOCK.block_dim`` threads per cloud; with the
#: options of every FPS module (no FMA).
FPS_BLOCK = KernelTable(
    f"{__name__}.fps_block", (fps_block,), TYPES, options=OPTIONS, block_dim=FPS_BLOCK_DIM, cuda_only=True
)


# --------------------------------------------------------------------------------------------------------
# the strip design: one block per cloud, the cloud's distances in the lanes' registers (many small clouds)
# --------------------------------------------------------------------------------------------------------
#
# Lane ``lane`` of the block owns the points ``lane + j * nthreads`` (j < ``STRIP``) of its cloud and holds
# their squared distances to the chosen set in registers (a Warp vector of ``STRIP`` float64, every loop over
# it unrolled: constant indices). A step reads the lane's points (``STRIP`` independent loads, all in flight
# at once; a cloud of 8192 float32 points is 96 KB, L1-resident) and the new sample (one address for every
# lane), stores nothing, and makes one block reduction of ``(distance, index)`` (:func:`block_best`);
# :func:`fps_block` also reads and writes every distance in memory each step, a four-load chain at a time,
# and reduces twice. Same folds, same order of arithmetic, same total order on candidates: the same samples
# and distances, bit for bit.

#: Points per lane of the strip design; a cloud of at most ``STRIP * STRIP_BLOCK_DIM`` points takes it.
STRIP = wp.constant(16)
#: Threads per block of the strip design (16 x 512 = 8192 points: the batched small-cloud case of issue 49).
STRIP_BLOCK_DIM = 512
#: The register cap of the strip kernel: a block of 512 lanes fits an SM's 65,536 registers. ``ptxas -v``
#: (13.0, sm_90, the test_codegen PTX, 2026-11-29): at 128 it spills ~0.25 KB a lane (L1); with the
#: coordinates in registers too (loaded once) it spilled ~0.9 KB (uncapped: 254 registers, a launch that
#: fails). Untimed: the next GPU run decides (``bench_fps.py --designs``: ``strip`` against ``block``).
STRIP_MAX_REGISTERS = 65536 // STRIP_BLOCK_DIM


@wp.func
def strip_fold(d: wp.float64, q: wp.vec3d, p: wp.vec3d, i: int, cur: int):
    """:func:`~warpgeo._kernels.fps.fold_loaded` of a distance held in a register (nothing stored)."""
    if d > CHOSEN:
        d = CHOSEN if i == cur else wp.min(d, distance_sq(q - p))
    return d


def fps_strip(
    points: wp.array2d(dtype=Any),
    lengths: wp.array(dtype=wp.int64),
    num_samples: wp.array(dtype=wp.int64),
    start: wp.array(dtype=wp.int64),
    out_index: wp.array2d(dtype=wp.int64),
    out_dist: wp.array2d(dtype=Any),
):
    """Greedy FPS of cloud ``b`` by one block, its distances in the lanes' registers (launched tiled, one
    block per cloud; a cloud of at most ``STRIP * wp.block_dim()`` points: the host checks, and points past
    that are never read)."""
    b, lane = wp.tid()
    nthreads = wp.block_dim()
    n, k, cur = cloud(b, points, lengths, num_samples, start, out_index)
    n = wp.min(n, STRIP * nthreads)
    k = wp.min(k, n)
    for s in range(k + lane, out_index.shape[1], nthreads):
        out_index[b, s] = SENTINEL_INDEX
        out_dist[b, s] = out_dist.dtype(wp.nan)
    ds = wp.vector(CHOSEN, length=STRIP)  # a slot past the cloud's end: never a candidate
    for j in range(STRIP):
        if lane + j * nthreads < n:
            ds[j] = FAR
    last = wp.max(n - 1, 0)
    best = wp.float64(wp.inf)
    for s in range(k):
        if lane == 0:
            out_index[b, s] = wp.int64(cur)
            out_dist[b, s] = out_dist.dtype(wp.sqrt(best))
        p = wp.vec3d(points[b, cur])
        my_best = CHOSEN
        my_index = NO_POINT
        for j in range(STRIP):
            i = lane + j * nthreads
            q = wp.vec3d(points[b, wp.min(i, last)])  # past the end: a valid point, ignored (CHOSEN)
            d = strip_fold(ds[j], q, p, i, cur)
            ds[j] = d
            # ascending indices within the lane and a strict '>': the lowest index among equal distances
            if d > my_best:
                my_best = d
                my_index = i
        best, cur = block_best(my_best, my_index)
        cur = valid_sample(cur, n)


#: ``FPS_STRIP[precision].fps_strip``, launched tiled with ``FPS_STRIP.block_dim`` threads per cloud (clouds
#: of at most ``STRIP * STRIP_BLOCK_DIM`` points); the options of every FPS module, every strip loop unrolled.
FPS_STRIP = KernelTable(
    f"{__name__}.fps_strip",
    (fps_strip,),
    TYPES,
    options={**OPTIONS, "max_unroll": STRIP},
    block_dim=STRIP_BLOCK_DIM,
    max_registers=STRIP_MAX_REGISTERS,
    cuda_only=True,
)


def fps_strip_held(
    points: wp.array2d(dtype=Any),
    lengths: wp.array(dtype=wp.int64),
    num_samples: wp.array(dtype=wp.int64),
    start: wp.array(dtype=wp.int64),
    out_index: wp.array2d(dtype=wp.int64),
    out_dist: wp.array2d(dtype=Any),
):
    """:func:`fps_strip` with the lanes' coordinates held in registers too (loaded once, in the points'
    precision, widened where used): no load a step but the new sample's, at the price of spills (~0.9 KB a
    lane at 128 registers). The A/B variant of the strip design (forced as ``"strip_held"``)."""
    b, lane = wp.tid()
    nthreads = wp.block_dim()
    n, k, cur = cloud(b, points, lengths, num_samples, start, out_index)
    n = wp.min(n, STRIP * nthreads)
    k = wp.min(k, n)
    for s in range(k + lane, out_index.shape[1], nthreads):
        out_index[b, s] = SENTINEL_INDEX
        out_dist[b, s] = out_dist.dtype(wp.nan)
    zero = out_dist.dtype(0.0)
    xs = wp.vector(zero, length=STRIP)
    ys = wp.vector(zero, length=STRIP)
    zs = wp.vector(zero, length=STRIP)
    ds = wp.vector(CHOSEN, length=STRIP)  # a slot past the cloud's end: never a candidate
    for j in range(STRIP):
        i = lane + j * nthreads
        if i < n:
            loaded = points[b, i]
            xs[j] = loaded[0]
            ys[j] = loaded[1]
            zs[j] = loaded[2]
            ds[j] = FAR
    best = wp.float64(wp.inf)
    for s in range(k):
        if lane == 0:
            out_index[b, s] = wp.int64(cur)
            out_dist[b, s] = out_dist.dtype(wp.sqrt(best))
        p = wp.vec3d(points[b, cur])
        my_best = CHOSEN
        my_index = NO_POINT
        for j in range(STRIP):
            i = lane + j * nthreads
            q = wp.vec3d(wp.float64(xs[j]), wp.float64(ys[j]), wp.float64(zs[j]))
            d = strip_fold(ds[j], q, p, i, cur)
            ds[j] = d
            if d > my_best:  # ascending indices, a strict '>': the lowest index among equal distances
                my_best = d
                my_index = i
        best, cur = block_best(my_best, my_index)
        cur = valid_sample(cur, n)


#: ``FPS_STRIP_HELD[precision].fps_strip_held``: the strip design's A/B variant, launched as ``FPS_STRIP``.
FPS_STRIP_HELD = KernelTable(
    f"{__name__}.fps_strip_held",
    (fps_strip_held,),
    TYPES,
    options={**OPTIONS, "max_unroll": STRIP},
    block_dim=STRIP_BLOCK_DIM,
    max_registers=STRIP_MAX_REGISTERS,
    cuda_only=True,
)


# --------------------------------------------------------------------------------------------------------
# the grid designs: a cloud's points shared among the blocks of a group (large clouds, the whole GPU)
# --------------------------------------------------------------------------------------------------------
#
# Cloud b is sampled by a group of G blocks (``partials.shape[2]``; block ``b * G + g`` of the launch),
# block g owning the contiguous points ``[n * g // G, n * (g + 1) // G)`` and their distances to the chosen
# set. Step s of the greedy order is the same on every design:
#
# 1. every block of the group reduces the G candidates of step s - 1 (``partials[b, (s - 1) % 2, :]``) to the
#    sample s (:func:`take_best`: the largest distance, the lowest index among equals);
# 2. block 0 records it; every block folds it into its share and writes its own best candidate for step
#    s + 1 into ``partials[b, s % 2, g]`` (:func:`grid_step`).
#
# Between 2 of one step and 1 of the next, every candidate of the group must be written: a kernel boundary
# (:func:`fps_steps`, one launch per step: portable, capturable in a CUDA graph), or a barrier of the group's
# blocks (:func:`fps_persistent`, one launch for the whole order, every block resident). Two slots suffice: a
# block writes slot s % 2 again at step s + 2, after the barrier of step s + 1, which every block reaches
# only after reading slot s % 2. Both designs call the same functions, so the per-step launches, which run
# on the CPU, prove the arithmetic of the persistent kernel bit for bit.

#: Threads per block of the grid designs (a block owns N / G points: a few per lane at N = 100k on 132 SMs).
GRID_BLOCK_DIM = 256
#: ``sync[b, ...]`` columns of the persistent kernel's group state: arrivals at the barrier (the count only
#: grows: G per step), blocks that left the loop, and the flag of a barrier that timed out.
SYNC_ARRIVED, SYNC_LEFT, SYNC_FAILED = 0, 1, 2
#: Columns of ``sync`` (int64 each).
SYNC_COLUMNS = 4


def _native(snippet: str) -> str:
    """A native snippet with the ``sync`` column names replaced by their numbers."""
    for name, column in (
        ("SYNC_ARRIVED", SYNC_ARRIVED),
        ("SYNC_LEFT", SYNC_LEFT),
        ("SYNC_FAILED", SYNC_FAILED),
    ):
        snippet = snippet.replace(name, str(column))
    return snippet


@wp.func
def better(a: wp.vec2d, c: wp.vec2d):
    """The better of two candidates ``(squared distance, index)``: the larger distance, the lower index among
    equal ones. A total order (for distances that are not NaN), so a reduction in any order picks the same."""
    if a[0] > c[0]:
        return a
    if a[0] == c[0] and a[1] < c[1]:
        return a
    return c


@wp.func
def block_best(d: wp.float64, i: int):
    """The block's best candidate of the lanes' ``(d, i)``, on every lane: one block reduction."""
    top = wp.tile_reduce(better, wp.tile(wp.vec2d(d, wp.float64(i)), preserve_type=True))[0]
    return top[0], int(top[1])


_LOAD_PARTIAL = """
#if defined(__CUDA_ARCH__)
    // through L2 (ld.global.cg): another SM wrote it, this SM's L1 may hold an older copy of the line
    const double2 v = __ldcg(reinterpret_cast<const double2*>(wp::address(partials, b, slot, g)));
    return wp::vec2d(v.x, v.y);
#else
    return *wp::address(partials, b, slot, g);
#endif
"""


@wp.func_native(_LOAD_PARTIAL)
def load_partial(partials: wp.array3d(dtype=wp.vec2d), b: int, slot: int, g: int) -> wp.vec2d:
    """``partials[b, slot, g]``, read from L2 on CUDA (written by another block)."""
    ...


@wp.func
def take_best(partials: wp.array3d(dtype=wp.vec2d), b: int, slot: int, lane: int, nthreads: int):
    """The best of the group's candidates in ``partials[b, slot]``: ``(squared distance, index)``, every lane."""
    mine = wp.vec2d(CHOSEN, wp.float64(NO_POINT))
    for g in range(lane, partials.shape[2], nthreads):
        mine = better(load_partial(partials, b, slot, g), mine)
    top = wp.tile_reduce(better, wp.tile(mine, preserve_type=True))[0]
    return top[0], int(top[1])


@wp.func
def share(n: int, g: int, groups: int):
    """Block ``g``'s points of a cloud of ``n`` among ``groups`` blocks: ``[lo, hi)`` (int64 products)."""
    lo = wp.int64(n) * wp.int64(g) // wp.int64(groups)
    hi = wp.int64(n) * wp.int64(g + 1) // wp.int64(groups)
    return int(lo), int(hi)


@wp.func
def begin_share(
    b: int,
    g: int,
    lane: int,
    nthreads: int,
    lo: int,
    hi: int,
    k: int,
    mindist: wp.array2d(dtype=wp.float64),
    out_index: wp.array2d(dtype=wp.int64),
    out_dist: wp.array2d(dtype=Any),
):
    """Reset the distances of the block's points; block 0 pads the row past its ``k`` samples."""
    if g == 0:
        for s in range(k + lane, out_index.shape[1], nthreads):
            out_index[b, s] = SENTINEL_INDEX
            out_dist[b, s] = out_dist.dtype(wp.nan)
    for i in range(lo + lane, hi, nthreads):
        mindist[b, i] = FAR


@wp.func
def grid_step(
    points: wp.array2d(dtype=Any),
    mindist: wp.array2d(dtype=wp.float64),
    partials: wp.array3d(dtype=wp.vec2d),
    out_index: wp.array2d(dtype=wp.int64),
    out_dist: wp.array2d(dtype=Any),
    b: int,
    g: int,
    lane: int,
    nthreads: int,
    lo: int,
    hi: int,
    k: int,
    s: int,
    cur: int,
    best: wp.float64,
):
    """Step ``s`` on block ``g``: sample ``s`` is point ``cur`` at squared distance ``best`` (block 0 records
    it); unless it is the last, fold it into the block's points and write their best candidate into slot
    ``s % 2``."""
    if g == 0 and lane == 0:
        out_index[b, s] = wp.int64(cur)
        out_dist[b, s] = out_dist.dtype(wp.sqrt(best))
    if s + 1 < k:
        my_best, my_index = scan4(points, mindist, b, lo, hi, cur, lane, nthreads)
        top, top_i = block_best(my_best, my_index)
        if lane == 0:
            partials[b, s % 2, g] = wp.vec2d(top, wp.float64(top_i))


@wp.func
def group_of(block: int, partials: wp.array3d(dtype=wp.vec2d), points: wp.array2d(dtype=Any)):
    """``(b, g, groups)`` of a block of the launch; ``b`` is past the batch (-1) for a block beyond it."""
    groups = wp.max(partials.shape[2], 1)
    b = block // groups
    if b >= wp.min(points.shape[0], partials.shape[0]):
        b = -1
    return b, block - (block // groups) * groups, groups


@wp.func
def valid_sample(cur: int, n: int):
    """``cur`` inside the cloud: a best of no candidate (NaN distances, value checks off) reads point 0."""
    if cur < 0 or cur >= n:
        return 0
    return cur


def fps_steps(
    points: wp.array2d(dtype=Any),
    lengths: wp.array(dtype=wp.int64),
    num_samples: wp.array(dtype=wp.int64),
    start: wp.array(dtype=wp.int64),
    mindist: wp.array2d(dtype=wp.float64),
    partials: wp.array3d(dtype=wp.vec2d),
    step: int,
    out_index: wp.array2d(dtype=wp.int64),
    out_dist: wp.array2d(dtype=Any),
):
    """Step ``step`` of every cloud (launched tiled, ``B * G`` blocks; one launch per step, in order)."""
    block, lane = wp.tid()
    nthreads = wp.block_dim()
    b, g, groups = group_of(block, partials, points)
    if b < 0:
        return
    n, k, cur = cloud(b, points, lengths, num_samples, start, out_index)
    lo, hi = share(n, g, groups)
    best = wp.float64(wp.inf)
    if step == 0:
        begin_share(b, g, lane, nthreads, lo, hi, k, mindist, out_index, out_dist)
    elif step < k:
        best, cur = take_best(partials, b, (step - 1) % 2, lane, nthreads)
        cur = valid_sample(cur, n)
    if step < k:
        grid_step(
            points, mindist, partials, out_index, out_dist, b, g, lane, nthreads, lo, hi, k, step, cur, best
        )


_ARRIVE_AND_WAIT = """
#if defined(__CUDA_ARCH__)
    // the block's candidate (written by this lane) out to every SM before the arrival counts
    __threadfence();
    unsigned long long* arrived = reinterpret_cast<unsigned long long*>(wp::address(sync, b, SYNC_ARRIVED));
    volatile long long* seen = reinterpret_cast<volatile long long*>(arrived);
    volatile long long* failed = reinterpret_cast<volatile long long*>(wp::address(sync, b, SYNC_FAILED));
    atomicAdd(arrived, 1ULL);
    const long long began = clock64();
    while (*seen < target) {
        if (*failed != 0) {
            return 0;
        }
        if (clock64() - began > timeout) {
            atomicExch(reinterpret_cast<unsigned long long*>(wp::address(sync, b, SYNC_FAILED)), 1ULL);
            return 0;
        }
    }
    __threadfence();
    return 1;
#else
    // CPU blocks run one after another: a group of more than one block can never meet; it fails at once
    *wp::address(sync, b, SYNC_ARRIVED) += 1;
    if (*wp::address(sync, b, SYNC_ARRIVED) >= target && *wp::address(sync, b, SYNC_FAILED) == 0) {
        return 1;
    }
    *wp::address(sync, b, SYNC_FAILED) = 1;
    return 0;
#endif
"""


@wp.func_native(_native(_ARRIVE_AND_WAIT))
def arrive_and_wait(sync: wp.array2d(dtype=wp.int64), b: int, target: wp.int64, timeout: wp.int64) -> int:
    """The group barrier, by one lane of each block: count this block in and wait until ``target`` blocks
    have arrived. 0 when the wait took more than ``timeout`` clock cycles (the group's failed flag is set,
    and every block waiting sees it and stops too), or when another block's wait failed; 1 otherwise."""
    ...


_LEAVE = """
#if defined(__CUDA_ARCH__)
    // every write of this block (outputs, distances) out before it counts as gone
    __threadfence();
    const long long before = (long long)atomicAdd(
        reinterpret_cast<unsigned long long*>(wp::address(sync, b, SYNC_LEFT)), 1ULL);
    if (before != groups - 1) {
        return 0;
    }
    __threadfence();
    return 1 + (int)(*reinterpret_cast<volatile long long*>(wp::address(sync, b, SYNC_FAILED)) != 0);
#else
    const wp::int64 before = *wp::address(sync, b, SYNC_LEFT);
    *wp::address(sync, b, SYNC_LEFT) = before + 1;
    if (before != groups - 1) {
        return 0;
    }
    return 1 + (int)(*wp::address(sync, b, SYNC_FAILED) != 0);
#endif
"""


@wp.func_native(_native(_LEAVE))
def leave(sync: wp.array2d(dtype=wp.int64), b: int, groups: int) -> int:
    """A block of group ``b`` is done, by one lane: 0 unless it is the last of the group to leave; then 1,
    or 2 when a barrier of the group failed (the last block then samples the cloud alone)."""
    ...


def fps_persistent(
    points: wp.array2d(dtype=Any),
    lengths: wp.array(dtype=wp.int64),
    num_samples: wp.array(dtype=wp.int64),
    start: wp.array(dtype=wp.int64),
    mindist: wp.array2d(dtype=wp.float64),
    partials: wp.array3d(dtype=wp.vec2d),
    sync: wp.array2d(dtype=wp.int64),
    timeout: wp.int64,
    out_index: wp.array2d(dtype=wp.int64),
    out_dist: wp.array2d(dtype=Any),
):
    """Every step of every cloud in one launch (tiled, ``B * G`` blocks, all resident at once; ``sync``
    zeroed): the steps of :func:`fps_steps`, a barrier of the group's blocks between two.

    A barrier that waits longer than ``timeout`` clock cycles (blocks not resident together after all: the
    launch is sized so that they are) fails the group: its blocks stop, and the last of them to leave samples
    the cloud again alone (:func:`block_fps`, the one-block kernel's loop): the same exact order, slowly.
    """
    block, lane = wp.tid()
    nthreads = wp.block_dim()
    b, g, groups = group_of(block, partials, points)
    if b < 0 or b >= sync.shape[0] or sync.shape[1] < SYNC_COLUMNS:
        return
    n, k, cur = cloud(b, points, lengths, num_samples, start, out_index)
    lo, hi = share(n, g, groups)
    begin_share(b, g, lane, nthreads, lo, hi, k, mindist, out_index, out_dist)
    best = wp.float64(wp.inf)
    for s in range(k):
        if s > 0:
            best, cur = take_best(partials, b, (s - 1) % 2, lane, nthreads)
            cur = valid_sample(cur, n)
        grid_step(
            points, mindist, partials, out_index, out_dist, b, g, lane, nthreads, lo, hi, k, s, cur, best
        )
        if s + 1 < k:
            met = int(1)
            if lane == 0:
                met = arrive_and_wait(sync, b, wp.int64(groups) * wp.int64(s + 1), timeout)
            if wp.tile_min(wp.tile(met))[0] == 0:
                break
    last = int(0)
    if lane == 0:
        last = leave(sync, b, groups)
    if wp.tile_max(wp.tile(last))[0] == 2:
        block_fps(points, lengths, num_samples, start, mindist, out_index, out_dist, b, lane, nthreads)


#: The two grid designs of the same steps, one module per precision: ``FPS_GRID[precision].fps_steps`` (a
#: launch per step) and ``.fps_persistent`` (one launch), tiled with ``GRID_BLOCK_DIM`` threads per block.
FPS_GRID = KernelTable(
    f"{__name__}.fps_grid",
    (fps_steps, fps_persistent),
    TYPES,
    options=OPTIONS,
    block_dim=GRID_BLOCK_DIM,
    cuda_only=True,
)
