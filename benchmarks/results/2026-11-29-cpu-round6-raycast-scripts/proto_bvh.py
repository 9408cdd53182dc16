# ruff: noqa: UP018, RUF046  (Warp kernels: int(0) and float(x) declare dynamic variables)
"""Prototype (evidence only, not for the library): an own binary BVH traversed by a Warp kernel, against
Warp's mesh_query_ray on its own SAH BVH and Open3D (Embree), one thread each, same rays.

Own BVH: binned SAH (16 bins, numpy, top-down), leaves of <= LEAF triangles; each node holds both children's
boxes (one 64-byte struct: one cache line per visit); triangles copied in leaf order as (v0, e1, e2, face)
(no index indirection); ordered traversal (near child first, far child pushed with its entry distance and
skipped on pop when beyond the best hit); Moller-Trumbore with a per-ray reciprocal direction."""

import ctypes
import sys
import time

import numpy as np
import open3d as o3d
import trimesh
import warp as wp

wp.config.quiet = True
wp.init()
LEAF = int(sys.argv[3]) if len(sys.argv) > 3 else 4
BINS = 16


def build(v, f):
    tri = v[f]  # (F, 3, 3)
    lo_t, hi_t = tri.min(1), tri.max(1)
    cen = (lo_t + hi_t) * 0.5
    order = np.arange(len(f))
    nodes = []  # each: [lo0, hi0, lo1, hi1, c0, c1, n0, n1]
    leaves = []  # list of index arrays in leaf order
    leaf_start = [0]

    def area(lo, hi):
        e = np.maximum(hi - lo, 0)
        return 2 * (e[..., 0] * e[..., 1] + e[..., 1] * e[..., 2] + e[..., 2] * e[..., 0])

    def split(idx):
        if len(idx) <= LEAF:
            return None
        c = cen[idx]
        clo, chi = c.min(0), c.max(0)
        best = (np.inf, None, None)
        for a in range(3):
            ext = chi[a] - clo[a]
            if ext <= 0:
                continue
            b = np.minimum(((c[:, a] - clo[a]) / ext * BINS).astype(np.int64), BINS - 1)
            cnt = np.bincount(b, minlength=BINS)
            blo = np.full((BINS, 3), np.inf)
            bhi = np.full((BINS, 3), -np.inf)
            np.minimum.at(blo, b, lo_t[idx])
            np.maximum.at(bhi, b, hi_t[idx])
            llo = np.minimum.accumulate(blo, 0)
            lhi = np.maximum.accumulate(bhi, 0)
            rlo = np.minimum.accumulate(blo[::-1], 0)[::-1]
            rhi = np.maximum.accumulate(bhi[::-1], 0)[::-1]
            lc = np.cumsum(cnt)
            rc = lc[-1] - lc
            cost = area(llo[:-1], lhi[:-1]) * lc[:-1] + area(rlo[1:], rhi[1:]) * rc[:-1]
            cost[(lc[:-1] == 0) | (rc[:-1] == 0)] = np.inf
            k = int(np.argmin(cost))
            if cost[k] < best[0]:
                best = (cost[k], a, b <= k)
        if best[1] is None:  # all centroids equal: halve
            h = len(idx) // 2
            return idx[:h], idx[h:]
        left = best[2]
        return idx[left], idx[~left]

    def box(idx):
        return lo_t[idx].min(0), hi_t[idx].max(0)

    # iterative: node slot filled when children are known
    nodes.append(None)
    stack = [(order, 0)]
    while stack:
        idx, slot = stack.pop()
        parts = split(idx)
        if parts is None:  # only for a root leaf
            raise RuntimeError("tiny mesh")
        entry = []
        for part in parts:
            lo, hi = box(part)
            if len(part) <= LEAF:
                entry.append((lo, hi, leaf_start[-1], len(part)))
                leaves.append(part)
                leaf_start.append(leaf_start[-1] + len(part))
            else:
                nodes.append(None)
                child = len(nodes) - 1
                entry.append((lo, hi, child, 0))
                stack.append((part, child))
        nodes[slot] = entry
    perm = np.concatenate(leaves)
    N = len(nodes)
    arr = np.zeros((N, 16), np.float32)
    ints = arr.view(np.int32)
    for i, ((lo0, hi0, c0, n0), (lo1, hi1, c1, n1)) in enumerate(nodes):
        arr[i, 0:3] = lo0
        arr[i, 3:6] = hi0
        arr[i, 6:9] = lo1
        arr[i, 9:12] = hi1
        ints[i, 12] = c0
        ints[i, 13] = c1
        ints[i, 14] = n0
        ints[i, 15] = n1
    t = tri[perm].astype(np.float32)
    tris = np.zeros((len(perm), 10), np.float32)
    tris[:, 0:3] = t[:, 0]
    tris[:, 3:6] = t[:, 1] - t[:, 0]
    tris[:, 6:9] = t[:, 2] - t[:, 0]
    tris.view(np.int32)[:, 9] = perm
    return arr, tris, nodes


@wp.struct
class Node:
    lo0: wp.vec3
    hi0: wp.vec3
    lo1: wp.vec3
    hi1: wp.vec3
    c0: wp.int32
    c1: wp.int32
    n0: wp.int32
    n1: wp.int32


@wp.struct
class Tri:
    v0: wp.vec3
    e1: wp.vec3
    e2: wp.vec3
    face: wp.int32


stack_i = wp.types.vector(length=64, dtype=wp.int32)
stack_f = wp.types.vector(length=64, dtype=wp.float32)


@wp.func
def slab(lo: wp.vec3, hi: wp.vec3, oi: wp.vec3, inv: wp.vec3, tmax: float):
    t1 = wp.cw_mul(lo, inv) - oi
    t2 = wp.cw_mul(hi, inv) - oi
    tn = wp.max(wp.max(wp.min(t1[0], t2[0]), wp.min(t1[1], t2[1])), wp.max(wp.min(t1[2], t2[2]), 0.0))
    tf = wp.min(wp.min(wp.max(t1[0], t2[0]), wp.max(t1[1], t2[1])), wp.min(wp.max(t1[2], t2[2]), tmax))
    if tn <= tf:
        return tn
    return wp.inf


@wp.kernel
def own(
    nodes: wp.array(dtype=Node),
    tris: wp.array(dtype=Tri),
    o: wp.array(dtype=wp.vec3),
    d: wp.array(dtype=wp.vec3),
    t_out: wp.array(dtype=float),
    face_out: wp.array(dtype=wp.int32),
):
    i = wp.tid()
    p = o[i]
    u = d[i]
    inv = wp.vec3(1.0 / u[0], 1.0 / u[1], 1.0 / u[2])
    oi = wp.cw_mul(p, inv)
    best = float(1.0e30)
    face = int(-1)
    st = stack_i()
    sd = stack_f()
    top = int(1)
    st[0] = 0
    sd[0] = 0.0
    while top > 0:
        top -= 1
        if sd[top] >= best:
            continue
        node = st[top]
        # descend without the stack while one child is hit
        while node >= 0:
            nd = nodes[node]
            t0 = slab(nd.lo0, nd.hi0, oi, inv, best)
            t1 = slab(nd.lo1, nd.hi1, oi, inv, best)
            nxt = int(-1)
            if t0 < wp.inf or t1 < wp.inf:
                # leaves first, in place
                if t0 < wp.inf and nd.n0 > 0:
                    for k in range(nd.c0, nd.c0 + nd.n0):
                        tr = tris[k]
                        pv = wp.cross(u, tr.e2)
                        det = wp.dot(tr.e1, pv)
                        if det != 0.0:
                            idet = 1.0 / det
                            tv = p - tr.v0
                            a = wp.dot(tv, pv) * idet
                            if a >= 0.0 and a <= 1.0:
                                qv = wp.cross(tv, tr.e1)
                                b = wp.dot(u, qv) * idet
                                if b >= 0.0 and a + b <= 1.0:
                                    tt = wp.dot(tr.e2, qv) * idet
                                    if tt >= 0.0 and tt < best:
                                        best = tt
                                        face = tr.face
                    t0 = wp.inf
                if t1 < wp.inf and nd.n1 > 0:
                    for k in range(nd.c1, nd.c1 + nd.n1):
                        tr = tris[k]
                        pv = wp.cross(u, tr.e2)
                        det = wp.dot(tr.e1, pv)
                        if det != 0.0:
                            idet = 1.0 / det
                            tv = p - tr.v0
                            a = wp.dot(tv, pv) * idet
                            if a >= 0.0 and a <= 1.0:
                                qv = wp.cross(tv, tr.e1)
                                b = wp.dot(u, qv) * idet
                                if b >= 0.0 and a + b <= 1.0:
                                    tt = wp.dot(tr.e2, qv) * idet
                                    if tt >= 0.0 and tt < best:
                                        best = tt
                                        face = tr.face
                    t1 = wp.inf
                if t0 < best and t1 < best:
                    if t0 <= t1:
                        st[top] = nd.c1
                        sd[top] = t1
                        top += 1
                        nxt = nd.c0
                    else:
                        st[top] = nd.c0
                        sd[top] = t0
                        top += 1
                        nxt = nd.c1
                elif t0 < best:
                    nxt = nd.c0
                elif t1 < best:
                    nxt = nd.c1
            node = nxt
    if face >= 0:
        t_out[i] = best
    else:
        t_out[i] = wp.inf
    face_out[i] = face


@wp.kernel
def bare(mesh: wp.uint64, o: wp.array(dtype=wp.vec3), d: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_ray(mesh, o[i], d[i], 1.0e6)
    if q.result:
        t[i] = q.t
    else:
        t[i] = wp.inf


def main():
    sub = int(sys.argv[1])
    n = int(sys.argv[2])
    mesh = trimesh.creation.icosphere(subdivisions=sub, radius=0.5)
    v = np.asarray(mesh.vertices, np.float32)
    f = np.asarray(mesh.faces, np.int64)
    s = time.perf_counter()
    arr, tris, _ = build(v.astype(np.float64), f)
    tb = time.perf_counter() - s
    print(
        f"faces {len(f):,} rays {n:,} leaf {LEAF}: own build (numpy, prototype) {tb:.1f} s, {len(arr):,} nodes"
    )
    NODES = wp.zeros(len(arr), dtype=Node, device="cpu")
    ctypes.memmove(NODES.ptr, arr.ctypes.data, arr.nbytes)
    TRIS = wp.zeros(len(tris), dtype=Tri, device="cpu")
    assert TRIS.strides[0] == 40, TRIS.strides
    ctypes.memmove(TRIS.ptr, tris.ctypes.data, tris.nbytes)
    rng = np.random.default_rng(0)
    start = rng.normal(size=(n, 3))
    start = 2.0 * start / np.linalg.norm(start, axis=1, keepdims=True)
    aim = rng.uniform(-0.5, 0.5, (n, 3))
    dd = aim - start
    dd /= np.linalg.norm(dd, axis=1, keepdims=True)
    start = start.astype(np.float32)
    dd = dd.astype(np.float32)
    O = wp.array(start, dtype=wp.vec3, device="cpu")
    D = wp.array(dd, dtype=wp.vec3, device="cpu")
    T1 = wp.zeros(n, dtype=float, device="cpu")
    T2 = wp.zeros(n, dtype=float, device="cpu")
    FC = wp.zeros(n, dtype=wp.int32, device="cpu")
    m = wp.Mesh(
        points=wp.array(v, dtype=wp.vec3, device="cpu"),
        indices=wp.array(f.astype(np.int32).reshape(-1), dtype=wp.int32, device="cpu"),
    )
    scene = o3d.t.geometry.RaycastingScene()
    scene.add_triangles(o3d.core.Tensor(v), o3d.core.Tensor(f.astype(np.uint32)))
    rays = o3d.core.Tensor(np.concatenate([start, dd], 1))
    ref = scene.cast_rays(rays, nthreads=1)["t_hit"].numpy()
    wp.launch(bare, dim=n, inputs=[m.id, O, D, T1], device="cpu")
    wp.launch(own, dim=n, inputs=[NODES, TRIS, O, D, T2, FC], device="cpu")
    a, b = T1.numpy(), T2.numpy()
    both = np.isfinite(a) & np.isfinite(b)
    print(
        f"  own vs warp: hit/miss agree {(np.isfinite(a) == np.isfinite(b)).mean() * 100:.4f}%, max |dt| {np.abs(a[both] - b[both]).max():.1e}; vs open3d agree {(np.isfinite(ref) == np.isfinite(b)).mean() * 100:.4f}%"
    )

    def med(fn, k=3):
        ts = []
        for _ in range(k):
            s = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - s)
        return float(np.median(ts))

    for _r in range(3):
        to = med(lambda: scene.cast_rays(rays, nthreads=1))
        tw = med(lambda: wp.launch(bare, dim=n, inputs=[m.id, O, D, T1], device="cpu"))
        tn = med(lambda: wp.launch(own, dim=n, inputs=[NODES, TRIS, O, D, T2, FC], device="cpu"))
        print(
            f"  open3d {to * 1e3:5.0f} ms | warp mesh_query_ray {tw * 1e3:5.0f} ms ({to / tw:.2f}x) | own BVH {tn * 1e3:5.0f} ms ({to / tn:.2f}x)",
            flush=True,
        )


if __name__ == "__main__":
    main()
