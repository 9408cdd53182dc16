# ruff: noqa: UP018, RUF046  (Warp kernels: int(0) and float(x) declare dynamic variables)
"""Prototype (evidence only): the binary SAH BVH of proto_bvh.py collapsed to 4-wide nodes (children's boxes
as vec4 x/y/z rows: one node's four box tests as vector arithmetic), nearest-first stack order by a sorting
network; against Warp's mesh_query_ray, the binary prototype and Open3D, one thread."""

import ctypes
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proto_bvh import LEAF, Node, Tri, bare, build, np, o3d, own, stack_f, stack_i, trimesh, wp

sub = int(sys.argv[1])
n = int(sys.argv[2])


def area(lo, hi):
    e = np.maximum(hi - lo, 0)
    return 2 * (e[0] * e[1] + e[1] * e[2] + e[2] * e[0])


def collapse(bin_nodes):
    out = []
    sys.setrecursionlimit(10000)

    def make(idx):
        slot = len(out)
        out.append(None)
        children = list(bin_nodes[idx])
        while len(children) < 4:
            cand = [k for k, ch in enumerate(children) if ch[3] == 0]
            if not cand:
                break
            k = max(cand, key=lambda k: area(children[k][0], children[k][1]))
            ch = children.pop(k)
            children.extend(bin_nodes[ch[2]])
        entries = []
        for ch in children:
            entries.append((ch[0], ch[1], make(ch[2]), 0) if ch[3] == 0 else ch)
        out[slot] = entries
        return slot

    make(0)
    arr = np.zeros((len(out), 32), np.float32)
    ints = arr.view(np.int32)
    for i, entries in enumerate(out):
        for k in range(4):
            if k < len(entries):
                lo, hi, c, n = entries[k]
                for a in range(3):
                    arr[i, 4 * a + k] = lo[a]
                    arr[i, 12 + 4 * a + k] = hi[a]
                ints[i, 24 + k] = c
                ints[i, 28 + k] = n
            else:
                ints[i, 24 + k] = 0
                ints[i, 28 + k] = -1
    return arr


@wp.struct
class Node4:
    lox: wp.vec4
    loy: wp.vec4
    loz: wp.vec4
    hix: wp.vec4
    hiy: wp.vec4
    hiz: wp.vec4
    child: wp.vec4i
    cnt: wp.vec4i


@wp.func
def leaf_hit(
    tris: wp.array(dtype=Tri), start: int, count: int, p: wp.vec3, u: wp.vec3, best: float, face: int
):
    for k in range(start, start + count):
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
    return best, face


@wp.func
def cswap(d: wp.vec4, c: wp.vec4i, i: int, j: int):
    if d[j] < d[i]:
        x = d[i]
        d[i] = d[j]
        d[j] = x
        y = c[i]
        c[i] = c[j]
        c[j] = y
    return d, c


@wp.kernel
def own4(
    nodes: wp.array(dtype=Node4),
    tris: wp.array(dtype=Tri),
    o: wp.array(dtype=wp.vec3),
    d: wp.array(dtype=wp.vec3),
    t_out: wp.array(dtype=float),
    face_out: wp.array(dtype=wp.int32),
):
    i = wp.tid()
    p = o[i]
    u = d[i]
    ix = 1.0 / u[0]
    iy = 1.0 / u[1]
    iz = 1.0 / u[2]
    ox = wp.vec4(p[0] * ix)
    oy = wp.vec4(p[1] * iy)
    oz = wp.vec4(p[2] * iz)
    vx = wp.vec4(ix)
    vy = wp.vec4(iy)
    vz = wp.vec4(iz)
    best = float(1.0e30)
    face = int(-1)
    st = stack_i()
    sd = stack_f()
    top = int(1)
    st[0] = 0
    sd[0] = 0.0
    zero = wp.vec4(0.0)
    while top > 0:
        top -= 1
        if sd[top] >= best:
            continue
        nd = nodes[st[top]]
        ax = wp.cw_mul(nd.lox, vx) - ox
        bx = wp.cw_mul(nd.hix, vx) - ox
        ay = wp.cw_mul(nd.loy, vy) - oy
        by = wp.cw_mul(nd.hiy, vy) - oy
        az = wp.cw_mul(nd.loz, vz) - oz
        bz = wp.cw_mul(nd.hiz, vz) - oz
        tn = wp.max(wp.max(wp.min(ax, bx), wp.min(ay, by)), wp.max(wp.min(az, bz), zero))
        tf = wp.min(wp.min(wp.max(ax, bx), wp.max(ay, by)), wp.min(wp.max(az, bz), wp.vec4(best)))
        dist = wp.vec4(wp.inf)
        ids = wp.vec4i(0)
        for k in range(4):
            if nd.cnt[k] >= 0 and tn[k] <= tf[k]:
                if nd.cnt[k] > 0:
                    best, face = leaf_hit(tris, nd.child[k], nd.cnt[k], p, u, best, face)
                else:
                    dist[k] = tn[k]
                    ids[k] = nd.child[k]
        dist, ids = cswap(dist, ids, 0, 1)
        dist, ids = cswap(dist, ids, 2, 3)
        dist, ids = cswap(dist, ids, 0, 2)
        dist, ids = cswap(dist, ids, 1, 3)
        dist, ids = cswap(dist, ids, 1, 2)
        for j in range(4):
            k = 3 - j
            if dist[k] < best:
                st[top] = ids[k]
                sd[top] = dist[k]
                top += 1
    if face >= 0:
        t_out[i] = best
    else:
        t_out[i] = wp.inf
    face_out[i] = face


mesh = trimesh.creation.icosphere(subdivisions=sub, radius=0.5)
v = np.asarray(mesh.vertices, np.float32)
f = np.asarray(mesh.faces, np.int64)
s = time.perf_counter()
arr, tris, bnodes = build(v.astype(np.float64), f)
arr4 = collapse(bnodes)
tb = time.perf_counter() - s
print(
    f"faces {len(f):,} rays {n:,} leaf {LEAF}: build {tb:.1f} s, {len(arr):,} binary nodes, {len(arr4):,} 4-wide nodes"
)


def to_wp(a, dtype, stride):
    out = wp.zeros(len(a), dtype=dtype, device="cpu")
    assert out.strides[0] == stride, out.strides
    ctypes.memmove(out.ptr, a.ctypes.data, a.nbytes)
    return out


NODES = to_wp(arr, Node, 64)
NODES4 = to_wp(arr4, Node4, 128)
TRIS = to_wp(tris, Tri, 40)
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
T1, T2, T3 = (wp.zeros(n, dtype=float, device="cpu") for _ in range(3))
FC = wp.zeros(n, dtype=wp.int32, device="cpu")
m = wp.Mesh(
    points=wp.array(v, dtype=wp.vec3, device="cpu"),
    indices=wp.array(f.astype(np.int32).reshape(-1), dtype=wp.int32, device="cpu"),
)
scene = o3d.t.geometry.RaycastingScene()
scene.add_triangles(o3d.core.Tensor(v), o3d.core.Tensor(f.astype(np.uint32)))
rays = o3d.core.Tensor(np.concatenate([start, dd], 1))
ref = scene.cast_rays(rays, nthreads=1)["t_hit"].numpy()
runs = {
    "warp mesh_query_ray": lambda: wp.launch(bare, dim=n, inputs=[m.id, O, D, T1], device="cpu"),
    "own binary": lambda: wp.launch(own, dim=n, inputs=[NODES, TRIS, O, D, T2, FC], device="cpu"),
    "own 4-wide": lambda: wp.launch(own4, dim=n, inputs=[NODES4, TRIS, O, D, T3, FC], device="cpu"),
}
for r in runs.values():
    r()
a, b, c = T1.numpy(), T2.numpy(), T3.numpy()
for name, x in (("binary", b), ("4-wide", c)):
    both = np.isfinite(a) & np.isfinite(x)
    print(
        f"  {name} vs warp: hit/miss agree {(np.isfinite(a) == np.isfinite(x)).mean() * 100:.4f}%, max |dt| {np.abs(a[both] - x[both]).max():.1e}"
    )


def med(fn, k=3):
    ts = []
    for _ in range(k):
        s = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - s)
    return float(np.median(ts))


for _rnd in range(3):
    to = med(lambda: scene.cast_rays(rays, nthreads=1))
    line = f"  open3d {to * 1e3:5.0f} ms"
    for name, r in runs.items():
        t = med(r)
        line += f" | {name} {t * 1e3:5.0f} ms ({to / t:.2f}x)"
    print(line, flush=True)
