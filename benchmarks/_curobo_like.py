"""The benchmark's speed-of-light reference: sphere-mesh cost with cuRobo v1's semantics (not its code).

One Warp kernel: each sphere against each mesh, one closest-point query bounded by ``max_dist`` with Warp's
sign (the 3-ray vote, or the pseudo-normal), the same smooth cost and gradient as warpgeo. What it does not
do is what makes warpgeo's cost exact: a sphere whose centre lies deeper inside a mesh than ``max_dist``
finds no face and costs 0 (a missed collision), and there is no box test or grid. Benchmark only.
"""

from __future__ import annotations

import warp as wp

wp.set_module_options({"enable_backward": False})


@wp.kernel
def bounded_cost(
    spheres: wp.array(dtype=wp.vec4),
    mesh_ids: wp.array(dtype=wp.uint64),
    inv_poses: wp.array(dtype=wp.transform),
    max_dist: float,
    eta: float,
    use_normal_sign: int,
    cost: wp.array(dtype=float),
    grad: wp.array(dtype=wp.vec4),
):
    i = wp.tid()
    s = spheres[i]
    r = s[3]
    total = float(0.0)  # noqa: UP018 (a Warp variable, not a constant)
    g = wp.vec4()
    if r >= 0.0:
        for m in range(mesh_ids.shape[0]):
            xf = inv_poses[m]
            p = wp.transform_point(xf, wp.vec3(s[0], s[1], s[2]))
            if use_normal_sign != 0:
                q = wp.mesh_query_point_sign_normal(mesh_ids[m], p, max_dist)
            else:
                q = wp.mesh_query_point(mesh_ids[m], p, max_dist)
            if q.result:
                diff = p - wp.mesh_eval_position(mesh_ids[m], q.face, q.u, q.v)
                d = wp.length(diff) * q.sign
                phi = r + eta - d
                if phi > 0.0:
                    dphi = float(1.0)  # noqa: UP018
                    if phi <= eta:
                        total += phi * phi / (2.0 * eta)
                        dphi = phi / eta
                    else:
                        total += phi - 0.5 * eta
                    n = wp.quat_rotate_inv(wp.transform_get_rotation(xf), diff / d)
                    g += wp.vec4(-dphi * n[0], -dphi * n[1], -dphi * n[2], dphi)
    cost[i] = total
    grad[i] = g


class BoundedCost:
    """``bounded_cost`` as an autograd call with cuRobo's calling pattern (buffers allocated once, reused):
    the fallback peer of ``bench_curobo_call.py`` where cuRobo's own files are absent. Not cuRobo.

    Args:
        mesh_ids: ``(M,)`` uint64 tensor of ``wp.Mesh`` ids, on the spheres' device.
        inv_poses: ``(M, 7)`` float32 tensor of inverse mesh poses (Warp's transform: position, quaternion
            xyzw).
        n: spheres per call; ``max_dist``, ``eta``: as ``bounded_cost``.

    Example:
        >>> cost = BoundedCost(ids, inv_poses, 16, 0.1, 0.0)(spheres)  # spheres (..., 16, 4), requires_grad
    """

    def __init__(self, mesh_ids, inv_poses, n: int, max_dist: float, eta: float):
        import torch

        self.mesh_ids, self.inv_poses, self.max_dist, self.eta = mesh_ids, inv_poses, max_dist, eta
        self.cost = torch.zeros(n, device=mesh_ids.device)
        self.grad = torch.zeros(n, 4, device=mesh_ids.device)
        outer = self

        class _Function(torch.autograd.Function):
            @staticmethod
            def forward(ctx, spheres):
                wdev = wp.device_from_torch(spheres.device)
                wp.launch(
                    bounded_cost,
                    dim=outer.cost.shape[0],
                    inputs=[
                        wp.from_torch(spheres.detach().reshape(-1, 4), dtype=wp.vec4),
                        wp.from_torch(outer.mesh_ids, dtype=wp.uint64),
                        wp.from_torch(outer.inv_poses, dtype=wp.transform),
                        outer.max_dist,
                        outer.eta,
                        0,
                        wp.from_torch(outer.cost),
                        wp.from_torch(outer.grad, dtype=wp.vec4),
                    ],
                    device=wdev,
                    stream=None if wdev.is_cpu else wp.stream_from_torch(spheres.device),
                )
                ctx.shape = spheres.shape
                return outer.cost.view(spheres.shape[:-1])

            @staticmethod
            def backward(ctx, grad_output):
                return outer.grad.view(ctx.shape) * grad_output.unsqueeze(-1)

        self._function = _Function

    def __call__(self, spheres):
        return self._function.apply(spheres)
