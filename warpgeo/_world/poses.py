"""Poses ``[x, y, z, qw, qx, qy, qz]`` (world-from-entry, float64): reading and checking them, composing them
(:func:`compose_poses`), a scene node's rigid transform as one, and what the kernels read of them: the
mesh-from-world transforms in Warp's order and the posed boxes of the broad phase (tensor ops, no host
sync)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

#: A quaternion whose norm is within this of 1 is renormalised; farther off, it is refused.
QUAT_NORM_TOL = 1.0e-3


_IDENTITY_POSE = (0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)


def _check_poses(value: torch.Tensor, norm: torch.Tensor) -> None:
    """The pose value checks: finite, unit quaternions (one device-to-host copy)."""
    host = torch.cat([torch.isfinite(value).all().reshape(1).to(norm.dtype), norm.reshape(-1)]).cpu()
    finite, norm_host = bool(host[0]), host[1:].reshape(norm.shape)
    if not finite:
        raise ValueError("poses must be finite; got NaN or inf")
    bad = (norm_host - 1.0).abs() > QUAT_NORM_TOL
    if bool(bad.any()):
        e, m = (int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"poses[{e}, {m}] must hold a unit quaternion [qw, qx, qy, qz] (norm within {QUAT_NORM_TOL} "
            f"of 1); got {value[e, m, 3:].tolist()} with norm {float(norm_host[e, m]):.6g}"
        )


def _real_tensor(t: torch.Tensor, name: str) -> torch.Tensor:
    """``t`` detached; TypeError for complex (never silently cast to real), ValueError for meta tensors."""
    if t.is_complex():
        raise TypeError(f"{name} must be real numbers; got {t.dtype}")
    if t.device.type == "meta":
        raise ValueError(f"{name} is a meta tensor (it holds no values)")
    return t.detach()


def _real_array(x: Any, name: str) -> torch.Tensor | None:
    """``x`` as a tensor (float64 unless it was one), or None when it is ragged (an object array);
    TypeError for complex or non-numeric values (never silently cast to real)."""
    if isinstance(x, torch.Tensor):
        return _real_tensor(x, name)
    try:
        arr = np.asarray(x)
    except ValueError:  # ragged nested lists (NumPy >= 1.24)
        return None
    except Exception as exc:  # e.g. a list of meta tensors
        raise ValueError(f"{name} could not be read as an array of numbers: {exc}") from exc
    if arr.dtype == object:
        try:  # ragged, or Python ints beyond float64's range (NumPy keeps those as objects)
            np.asarray(x, dtype=np.float64)
        except OverflowError:
            raise ValueError(f"{name} must be real numbers within the float64 range; got {x!r:.80}") from None
        except (ValueError, TypeError):
            pass
        return None
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be real numbers; got dtype {arr.dtype}")
    return torch.as_tensor(arr.astype(np.float64))


def _pose_tensor(poses: Any, num_envs: int, max_meshes: int, counts: tuple[int, ...]) -> torch.Tensor:
    value = _real_array(poses, "poses")
    if value is not None:
        return value
    # ragged: one list of (x, y, z, qw, qx, qy, qz) per environment
    if not isinstance(poses, Sequence) or len(poses) != num_envs:
        raise ValueError(f"poses must be an array of shape ({num_envs}, {max_meshes}, 7) or one list per env")
    out = torch.tensor(_IDENTITY_POSE, dtype=torch.float64).repeat(num_envs, max_meshes, 1)
    for e, env_poses in enumerate(poses):
        arr = _real_array(env_poses, f"poses[{e}]")
        if arr is None or arr.dim() != 2 or arr.shape[1] != 7 or arr.shape[0] != counts[e]:
            got = "a ragged list" if arr is None else tuple(arr.shape)
            raise ValueError(f"poses[{e}] must have shape ({counts[e]}, 7); got {got}")
        out[e, : counts[e]] = arr
    return out


def _quat_rotate(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate ``v (..., 3)`` by unit quaternions ``q (..., 4) = (w, x, y, z)``."""
    w, u = q[..., :1], q[..., 1:]
    t = 2.0 * torch.cross(u, v, dim=-1)
    return v + w * t + torch.cross(u, t, dim=-1)


#: Relative padding of a posed box (of its largest coordinate and its diagonal): far more than the rounding of
#: a float32 transform of a point into the mesh's frame, so the broad phase never drops a pair the exact path
#: would score.
_POSED_BOX_PAD = 2.0**-20


def _posed_boxes(bounds: torch.Tensor, poses: torch.Tensor) -> torch.Tensor:
    """``(E, M, 2, 3)`` float32: the world-frame axis-aligned box ``(lower, upper)`` around each mesh's box
    ``bounds`` (``(E, M, 2, 3)``, mesh frame) posed by ``poses`` (``(E, M, 7)`` float64, unit quaternions),
    padded and rounded outwards (beyond float32's range: the largest float32 or inf), so that it holds the
    posed mesh. Tensor operations only (no host sync)."""
    box = bounds.to(torch.float64)
    lo, hi = box[..., 0, :], box[..., 1, :]
    centre, half = (lo + hi) / 2, (hi - lo) / 2
    q = poses[..., 3:]
    # the box's half-extent along world axis k: sum over mesh axes j of |R[k, j]| * half[j]
    axes = torch.eye(3, dtype=torch.float64, device=box.device).expand(*q.shape[:-1], 3, 3)
    columns = _quat_rotate(q[..., None, :].expand(*q.shape[:-1], 3, 4), axes)  # (E, M, 3 (j), 3 (k))
    extent = (columns.abs() * half[..., :, None]).sum(dim=-2)
    middle = _quat_rotate(q, centre) + poses[..., :3]
    pad = _POSED_BOX_PAD * (middle.abs() + extent).amax(dim=-1, keepdim=True)
    lower, upper = middle - extent - pad, middle + extent + pad
    lower32, upper32 = lower.to(torch.float32), upper.to(torch.float32)
    down = torch.nextafter(lower32, torch.full_like(lower32, -math.inf))  # a fill on the device, no host copy
    up = torch.nextafter(upper32, torch.full_like(upper32, math.inf))
    lower32 = torch.where(lower32.double() > lower, down, lower32)
    upper32 = torch.where(upper32.double() < upper, up, upper32)
    return torch.stack([lower32, upper32], dim=-2).contiguous()


def _inverse_warp_transform(poses: torch.Tensor) -> torch.Tensor:
    """World-from-mesh ``[t, qw, qx, qy, qz]`` -> mesh-from-world in Warp's ``[t, qx, qy, qz, qw]``."""
    t, q = poses[..., :3], poses[..., 3:]
    q_inv = torch.cat([q[..., :1], -q[..., 1:]], dim=-1)
    t_inv = -_quat_rotate(q_inv, t)
    return torch.cat([t_inv, q_inv[..., 1:], q_inv[..., :1]], dim=-1).contiguous()


#: A scene node's transform whose linear part is within this (largest entry) of a rotation is rigid.
_RIGID_TOL = 1.0e-6


def _split_transform(matrix: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray | None]:
    """A 4x4 transform ``[A t; 0 1]`` as ``(pose (7,), S)`` with ``A = R S``: ``pose`` the rigid part
    ``(t, R)`` and ``S = R^T A`` what is left (scale, shear, a mirror), or None where ``A`` is a rotation.
    ``R`` is the rotation nearest ``A`` (the polar decomposition's)."""
    if matrix.shape != (4, 4) or not np.isfinite(matrix).all():
        raise ValueError(f"{where}: the transform must be a finite 4x4 matrix; got {matrix!r:.80}")
    if not np.allclose(matrix[3], (0.0, 0.0, 0.0, 1.0), atol=1e-9):
        raise ValueError(f"{where}: the transform must be affine (last row 0, 0, 0, 1); got {matrix[3]}")
    linear = matrix[:3, :3]
    u, _, vt = np.linalg.svd(linear)
    if np.linalg.det(u @ vt) < 0:
        u[:, -1] = -u[:, -1]
    rotation = u @ vt
    rest = rotation.T @ linear
    pose = np.concatenate([matrix[:3, 3], _quaternion_of(rotation)])
    if np.abs(rest - np.eye(3)).max() <= _RIGID_TOL:
        return pose, None
    return pose, rest


def _quaternion_of(rotation: np.ndarray) -> np.ndarray:
    """The unit quaternion ``(w, x, y, z)``, ``w >= 0``, of a rotation matrix (its largest component first,
    the others from the matrix's off-diagonal sums and differences)."""
    m = rotation
    trace = np.trace(m)
    candidates = [trace, m[0, 0], m[1, 1], m[2, 2]]
    k = int(np.argmax(candidates))
    if k == 0:
        w = math.sqrt(max(1.0 + trace, 0.0)) / 2
        q = np.array(
            [w, (m[2, 1] - m[1, 2]) / (4 * w), (m[0, 2] - m[2, 0]) / (4 * w), (m[1, 0] - m[0, 1]) / (4 * w)]
        )
    else:
        i = k - 1
        j, l = (i + 1) % 3, (i + 2) % 3
        r = math.sqrt(max(1.0 + m[i, i] - m[j, j] - m[l, l], 0.0))
        s = 0.5 / r
        v = np.zeros(3)
        v[i] = r / 2
        v[j] = (m[j, i] + m[i, j]) * s
        v[l] = (m[l, i] + m[i, l]) * s
        q = np.array([(m[l, j] - m[j, l]) * s, *v])
    q /= np.linalg.norm(q)
    return q if q[0] >= 0 else -q


def compose_poses(outer: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """``outer ∘ inner`` of poses ``[x, y, z, qw, qx, qy, qz]`` (float64, unit quaternions): where ``inner``
    places a geometry in a frame that ``outer`` places in the world, the geometry's world pose."""
    t_a, q_a = outer[:3], outer[3:]
    t_b, q_b = inner[:3], inner[3:]
    w1, v1 = q_a[0], q_a[1:]
    w2, v2 = q_b[0], q_b[1:]
    q = np.concatenate([[w1 * w2 - v1 @ v2], w1 * v2 + w2 * v1 + np.cross(v1, v2)])
    twice = 2.0 * np.cross(v1, t_b)  # t_b rotated by q_a: t_b + w1 (2 v1 x t_b) + v1 x (2 v1 x t_b)
    t = t_a + t_b + w1 * twice + np.cross(v1, twice)
    return np.concatenate([t, q / np.linalg.norm(q)])


def _pose_row(pose: Any, key: Any) -> torch.Tensor:
    """One pose of a dict of poses, ``[x, y, z, qw, qx, qy, qz]``, as a float64 tensor (on its device)."""
    row = _real_array(pose, f"poses[{key!r}]")
    if row is None or tuple(row.shape) != (7,):
        got = "a ragged list" if row is None else tuple(row.shape)
        raise ValueError(f"poses[{key!r}] must be [x, y, z, qw, qx, qy, qz] (shape (7,)); got {got}")
    return row.to(torch.float64)
