"""Hostile inputs through every public name (issue 9): nothing crashes, nothing is silently wrong.

Every public function, every public Function's ``apply``, every ``torch.ops.warpgeo.*`` op, ``MeshWorld``
(constructor, ``from_envs``, ``set_poses``, ``set_enabled``, ``kernel_args``) and the command line get
inputs a hostile (or careless) user would pass, with value checks on and off. The rules (DESIGN.md,
Conventions):

* no input crashes the process, checks on or off; the cases run in a subprocess (one interpreter for all
  of them: a signal kills only that run, which is then resumed after the crashing case);
* a refusal is a ValueError / TypeError / IndexError whose message names the argument; a refusal that needs
  tensor values (NaN, index ranges, lengths) may, with value checks off, give a garbage answer instead,
  never a crash;
* a finite input within its dtype's range gives the right answer.

The parts owned by other engineers that do not hold yet are marked ``xfail(strict=True)`` with their owner:
they pin the required behaviour, and turn into failures (to unmark) once fixed.

Sizes: launches over tensors with rows of >= 2 GiB are split or refused. The default run checks the
splitting logic with the launch limits lowered (exact equality with the unsplit result) and reserves a
4 GiB tensor without touching it; the full-size versions are marked ``slow`` (``python3 -m pytest -m slow``).
Soak (flat memory), threads and determinism are quick tests at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import torch
import trimesh
from conftest import assert_covers_every_op, every_op

import warpgeo
from warpgeo import _launch, _warp

ROOT = Path(__file__).resolve().parents[1]

_FPS = "FPS engineer (fps.py / _kernels/fps.py)"
_SDF_KERNEL = "SDF kernel engineer (_kernels/sdf.py)"


class Case(NamedTuple):
    """One hostile input: ``code`` is an expression run in the subprocess (see ``_PRELUDE``)."""

    name: str
    code: str
    #: (exception type, a word the message must hold: the argument's name); None: the call must return
    raises: tuple[type[Exception], str] | None = None
    #: the refusal reads tensor values: with value checks off the call may return (garbage) instead
    value: bool = False
    #: an expression on the result ``r`` that must hold when the call returns (with checks on, and off
    #: unless ``value``)
    check: str | None = None
    #: who owns the fix, where the required behaviour does not hold yet (xfail, strict)
    owner: str | None = None
    why: str = ""


def R(name, code, exc, word, *, value=False, owner=None, why=""):
    return Case(name, code, (exc, word), value, None, owner, why)


def OK(name, code, check=None, *, owner=None, why=""):
    return Case(name, code, None, False, check, owner, why)


V, T, I = ValueError, TypeError, IndexError

CASES: list[Case] = [
    # ---- farthest_point_sampling / FarthestPointSampling.apply / torch.ops.warpgeo.farthest_point_sampling
    R("fps_list_points", "farthest_point_sampling([[0.0, 0, 0]], 1)", T, "points"),
    R("fps_int_points", "farthest_point_sampling(torch.zeros(5, 3, dtype=torch.int64), 2)", T, "points"),
    R("fps_2d_coords", "farthest_point_sampling(torch.rand(5, 2), 2)", V, "points"),
    R("fps_meta_points", "farthest_point_sampling(torch.rand(5, 3, device='meta'), 2)", V, "points"),
    R("fps_k0", "farthest_point_sampling(torch.rand(5, 3), 0)", V, "num_samples"),
    R("fps_k_bool", "farthest_point_sampling(torch.rand(5, 3), True)", T, "num_samples"),
    R(
        "fps_k_2e28_f64",
        "farthest_point_sampling(torch.rand(2, 5, 3, dtype=torch.float64), 2**28)",
        V,
        "num_samples",
    ),
    R("fps_k_2e40", "farthest_point_sampling(torch.rand(2, 5, 3), 2**40)", V, "num_samples"),
    R(
        "fps_k_negative_per_cloud",
        "farthest_point_sampling(torch.rand(2, 5, 3), torch.tensor([2, -1]))",
        V,
        "num_samples",
        value=True,
    ),
    R(
        "fps_nan",
        "farthest_point_sampling(torch.tensor([[0.0, 0, 0], [float('nan'), 0, 0]]), 2)",
        V,
        "points",
        value=True,
    ),
    R(
        "fps_lengths_short",
        "farthest_point_sampling(torch.rand(64, 10, 3), 2, lengths=torch.full((1,), 10))",
        V,
        "lengths",
    ),
    R(
        "fps_lengths_too_long",
        "farthest_point_sampling(torch.rand(2, 10, 3), 2, lengths=torch.tensor([10, 1000]))",
        V,
        "lengths",
        value=True,
    ),
    R(
        "fps_lengths_negative",
        "farthest_point_sampling(torch.rand(2, 10, 3), 2, lengths=torch.tensor([-5, 3]))",
        V,
        "lengths",
        value=True,
    ),
    R(
        "fps_start_short",
        "farthest_point_sampling(torch.rand(64, 10, 3), 2, start_index=torch.zeros(1, dtype=torch.long))",
        V,
        "start_index",
    ),
    R(
        "fps_start_oob",
        "farthest_point_sampling(torch.rand(2, 10, 3), 2, start_index=100)",
        I,
        "start_index",
        value=True,
    ),
    R(
        "fps_generator_int",
        "farthest_point_sampling(torch.rand(10, 3), 3, random_start=True, generator=5)",
        T,
        "generator",
    ),
    R(
        "fps_apply_max_samples_below_k",
        "FarthestPointSampling.apply(torch.rand(4, 1000, 3), torch.full((4,), 1000), torch.full((4,), 1000), torch.zeros(4, dtype=torch.long), 1)",
        V,
        "num_samples",
        value=True,
    ),
    R(
        "fps_apply_lengths_short",
        "FarthestPointSampling.apply(torch.rand(64, 10, 3), torch.full((1,), 10), None, None, 2)",
        V,
        "lengths",
    ),
    R(
        "fps_op_start_short",
        "torch.ops.warpgeo.farthest_point_sampling(torch.rand(64, 10, 3), None, None, torch.zeros(1, dtype=torch.long), 2)",
        V,
        "start",
    ),
    OK(
        "fps_float64_scale_1e154",
        "farthest_point_sampling(torch.tensor([[0.0, 0, 0], [1.1e154, 0, 0], [1.3e154, 0, 0]], dtype=torch.float64), 2).tolist()",
        "r == [0, 2]",
    ),
    OK(
        "fps_float64_scale_1e300",
        "farthest_point_sampling(CLOUD64 * 1e300, 6).tolist()",
        "r == farthest_point_sampling(CLOUD64, 6).tolist()",
    ),
    OK(
        "fps_subnormal_cloud",
        "farthest_point_sampling(CLOUD64 * 1e-310, 6).tolist()",
        "r == farthest_point_sampling(CLOUD64, 6).tolist()",
    ),
    # ---- gather_points / GatherPoints.apply / torch.ops.warpgeo.gather_points*
    OK(
        "gather_batch_0",
        "gather_points(torch.rand(0, 3, 5), torch.zeros(0, 2, dtype=torch.long))",
        "r.shape == (0, 3, 2)",
    ),
    OK(
        "gather_batch_0_grouped",
        "gather_points(torch.rand(0, 3, 5), torch.zeros(0, 2, 4, dtype=torch.int32))",
        "r.shape == (0, 3, 2, 4)",
    ),
    OK(
        "gather_channels_0",
        "gather_points(torch.rand(2, 0, 5), torch.zeros(2, 4, dtype=torch.long))",
        "r.shape == (2, 0, 4)",
    ),
    OK(
        "gather_m_0",
        "gather_points(torch.rand(2, 3, 5), torch.zeros(2, 0, dtype=torch.long))",
        "r.shape == (2, 3, 0)",
    ),
    OK(
        "gather_n_0_padding",
        "gather_points(torch.rand(2, 3, 0), torch.full((2, 4), -1))",
        "r.shape == (2, 3, 4) and not r.any()",
    ),
    OK(
        "gather_weighted_batch_0",
        "gather_points(torch.rand(0, 3, 5), torch.zeros(0, 2, 3, dtype=torch.long), weight=torch.rand(0, 2, 3))",
        "r.shape == (0, 3, 2)",
    ),
    OK(
        "gather_noncontiguous",
        "gather_points(FEAT.transpose(1, 2).contiguous().transpose(1, 2), IDX.t().contiguous().t())",
        "torch.equal(r, gather_points(FEAT, IDX))",
    ),
    R("gather_idx_n", "gather_points(torch.rand(2, 3, 5), torch.full((2, 4), 5))", I, "idx", value=True),
    R(
        "gather_idx_minus_2",
        "gather_points(torch.rand(2, 3, 5), torch.full((2, 4), -2))",
        I,
        "idx",
        value=True,
    ),
    R(
        "gather_idx_huge",
        "gather_points(torch.rand(2, 3, 5), torch.full((2, 4), 2**40))",
        I,
        "idx",
        value=True,
    ),
    R("gather_idx_float", "gather_points(torch.rand(2, 3, 5), torch.zeros(2, 4))", T, "idx"),
    R(
        "gather_idx_int16",
        "gather_points(torch.rand(2, 3, 5), torch.zeros(2, 4, dtype=torch.int16))",
        T,
        "idx",
    ),
    R(
        "gather_features_int",
        "gather_points(torch.zeros(2, 3, 5, dtype=torch.int32), torch.zeros(2, 4, dtype=torch.long))",
        T,
        "features",
    ),
    R(
        "gather_features_2d",
        "gather_points(torch.rand(3, 5), torch.zeros(2, 4, dtype=torch.long))",
        V,
        "features",
    ),
    R(
        "gather_features_meta",
        "gather_points(torch.rand(2, 3, 5, device='meta'), torch.zeros(2, 4, dtype=torch.long))",
        V,
        "features",
    ),
    R("gather_deterministic_int", "gather_points(FEAT, IDX, deterministic=1)", T, "deterministic"),
    R(
        "gather_apply_batch_mismatch",
        "GatherPoints.apply(torch.rand(64, 1, 10), torch.zeros(1, 10**6, dtype=torch.long), False)",
        V,
        "idx",
    ),
    R(
        "gather_apply_idx_huge",
        "GatherPoints.apply(FEAT, torch.full((2, 4), 10**9), False)",
        I,
        "idx",
        value=True,
    ),
    R(
        "gather_op_idx_huge",
        "torch.ops.warpgeo.gather_points(FEAT, torch.full((2, 4), -10**9), False)",
        I,
        "idx",
        value=True,
    ),
    R(
        "gather_op_idx_4d",
        "torch.ops.warpgeo.gather_points(FEAT, torch.zeros(2, 1, 1, 1, dtype=torch.long), False)",
        V,
        "idx",
    ),
    R(
        "gather_weight_shape",
        "gather_points(FEAT, torch.zeros(2, 4, 3, dtype=torch.long), weight=torch.rand(2, 4, 2))",
        V,
        "weight",
    ),
    R(
        "gather_weight_int",
        "gather_points(FEAT, torch.zeros(2, 4, 3, dtype=torch.long), weight=torch.ones(2, 4, 3, dtype=torch.long))",
        T,
        "weight",
    ),
    R(
        "gather_weight_meta",
        "gather_points(FEAT, torch.zeros(2, 4, 3, dtype=torch.long), weight=torch.rand(2, 4, 3, device='meta'))",
        V,
        "weight",
    ),
    R("gather_weight_2d_idx", "gather_points(FEAT, IDX, weight=torch.rand(2, 4))", V, "idx"),
    R(
        "gather_weighted_op_idx_huge",
        "torch.ops.warpgeo.gather_points_weighted(FEAT, torch.full((2, 4, 3), 10**9), torch.rand(2, 4, 3), False)",
        I,
        "idx",
        value=True,
    ),
    R(
        "gather_backward_op_shape",
        "torch.ops.warpgeo.gather_points_backward(torch.rand(2, 3, 4), torch.zeros(2, 5, dtype=torch.long), 10, False)",
        V,
        "grad_out",
    ),
    R(
        "gather_backward_op_points_negative",
        "torch.ops.warpgeo.gather_points_backward(torch.rand(2, 3, 4), IDX, -1, False)",
        V,
        "num_points",
    ),
    OK(
        "gather_backward_op_idx_out_of_range",
        "torch.ops.warpgeo.gather_points_backward(torch.ones(2, 3, 4), torch.full((2, 4), 10**9), 5, False)",
        "r.shape == (2, 3, 5) and not r.any()",
    ),
    R(
        "gather_weighted_backward_op_shape",
        "torch.ops.warpgeo.gather_points_weighted_backward(torch.rand(2, 3, 5), FEAT, torch.zeros(2, 4, 3, dtype=torch.long), torch.rand(2, 4, 3), True, True, False)",
        V,
        "grad_out",
    ),
    OK(
        "gather_rows_of_2GiB_reserved",
        "gather_points(BIG_HALF, torch.tensor([[5], [2**30 - 1]]))",
        "torch.equal(r.flatten(), torch.stack([BIG_HALF[0, 0, 5], BIG_HALF[1, 0, 2**30 - 1]]))",
    ),
    # ---- chamfer_distance / ChamferResult / torch.ops.warpgeo.chamfer_distance
    R("chamfer_norm3", "chamfer_distance(torch.rand(1, 4, 3), torch.rand(1, 5, 3), norm=3)", V, "norm"),
    R(
        "chamfer_dtype_mismatch",
        "chamfer_distance(torch.rand(1, 4, 3), torch.rand(1, 5, 3, dtype=torch.float64))",
        T,
        "y",
    ),
    R(
        "chamfer_nan",
        "chamfer_distance(torch.rand(1, 4, 3), torch.full((1, 5, 3), float('nan')))",
        V,
        "y",
        value=True,
    ),
    R(
        "chamfer_lengths_too_long",
        "chamfer_distance(torch.rand(1, 4, 3), torch.rand(1, 5, 3), y_lengths=torch.tensor([100]))",
        V,
        "y_lengths",
        value=True,
    ),
    R(
        "chamfer_op_reduction",
        "torch.ops.warpgeo.chamfer_distance(torch.rand(1, 4, 3), torch.rand(1, 5, 3), None, None, 2, True, 'max', False)",
        V,
        "reduction",
    ),
    R(
        "chamfer_backward_op_grad_loss",
        "torch.ops.warpgeo.chamfer_distance_backward(torch.rand(2, 4, 3), torch.rand(2, 5, 3), None, None, "
        "torch.zeros(2, 4, dtype=torch.int64), torch.zeros(2, 5, dtype=torch.int64), torch.ones(1), None, None, "
        "2, True, None, True, True)",
        V,
        "grad_loss",
    ),
    R(
        "chamfer_backward_op_grad_dist_yx",
        "torch.ops.warpgeo.chamfer_distance_backward(torch.rand(2, 4, 3), torch.rand(2, 5, 3), None, None, "
        "torch.zeros(2, 4, dtype=torch.int64), torch.zeros(2, 5, dtype=torch.int64), None, None, "
        "torch.ones(2, 0), 2, True, 'mean', True, True)",
        V,
        "grad_dist_yx",
    ),
    R(
        "chamfer_backward_op_idx_dtype",
        "torch.ops.warpgeo.chamfer_distance_backward(torch.rand(2, 4, 3), torch.rand(2, 5, 3), None, None, "
        "torch.zeros(2, 4, dtype=torch.int32), torch.zeros(2, 5, dtype=torch.int64), torch.ones(()), None, None, "
        "2, True, 'mean', True, True)",
        T,
        "idx_xy",
    ),
    OK(
        "chamfer_result_fields",
        "ChamferResult(*chamfer_distance(torch.rand(1, 4, 3), torch.rand(1, 5, 3)))",
        "r.dist_xy.shape == (1, 4) and r.idx_yx.shape == (1, 5)",
    ),
    # ---- collision_pairs / self_collision_cost / torch.ops.warpgeo.self_collision_cost(_backward)
    R("pairs_float_links", "collision_pairs([0.5, 1.0])", T, "sphere_links"),
    R("pairs_negative_link", "collision_pairs([0, -3])", V, "sphere_links"),
    R("pairs_unknown_name", "collision_pairs([0, 1], ignore=[('a', 'z')], names=['a', 'b'])", V, "ignore"),
    OK("pairs_huge_link", "collision_pairs([0, 2**62])", "r.tolist() == [[0, 1]]"),
    R(
        "self_cost_3_wide",
        "self_collision_cost(torch.rand(2, 5, 3), collision_pairs(range(5)))",
        V,
        "spheres",
    ),
    R(
        "self_cost_pair_range",
        "self_collision_cost(torch.rand(2, 5, 4), torch.tensor([[0, 5]]))",
        I,
        "pairs",
        value=True,
    ),
    R(
        "self_cost_pair_int64_wrap",
        "self_collision_cost(torch.rand(2, 5, 4), torch.tensor([[0, 2**32 + 1]]))",
        I,
        "pairs",
        value=True,
    ),
    R(
        "self_cost_nan",
        "self_collision_cost(torch.full((2, 5, 4), float('nan')), collision_pairs(range(5)))",
        V,
        "spheres",
        value=True,
    ),
    R(
        "self_cost_margin_shape",
        "self_collision_cost(torch.rand(2, 5, 4), collision_pairs(range(5)), margin=torch.zeros(3))",
        V,
        "margin",
    ),
    R(
        "self_cost_reduction",
        "self_collision_cost(torch.rand(5, 4), collision_pairs(range(5)), reduction='mean')",
        V,
        "reduction",
    ),
    OK(
        "self_cost_far_float32",
        "self_collision_cost(torch.tensor([[0.0, 0, 0, 1e38], [3e38, 0, 0, 1e38]]), torch.tensor([[0, 1]]))",
        "r.item() == 0.0",
    ),
    R(
        "self_cost_op_pairs",
        "torch.ops.warpgeo.self_collision_cost(torch.rand(1, 5, 4), torch.tensor([[-9, 1]]), None, 0.0, 'max')",
        I,
        "pairs",
        value=True,
    ),
    R(
        "self_cost_backward_op_arg",
        "torch.ops.warpgeo.self_collision_cost_backward(torch.ones(1), torch.rand(1, 5, 4), "
        "torch.tensor([[0, 1]]), None, 0.0, 'max', torch.zeros(3, dtype=torch.int32))",
        V,
        "arg",
    ),
    # ---- Robot / torch.ops.warpgeo.forward_kinematics(_backward)
    R(
        "robot_q_dof",
        "Robot.from_urdf(ARM, spheres={'b': [[0.1, 0, 0, 0.05]]}).spheres(torch.zeros(2, 3))",
        V,
        "q",
    ),
    R("robot_q_int", "Robot.from_urdf(ARM).link_poses(torch.zeros(2, 1, dtype=torch.int64))", T, "q"),
    R("robot_q_nan", "Robot.from_urdf(ARM).spheres(torch.tensor([[float('nan')]]))", V, "q", value=True),
    R("robot_urdf_joint_type", "Robot.from_urdf(ARM.replace('revolute', 'hinge'))", V, "hinge"),
    R(
        "robot_urdf_missing_link",
        "Robot.from_urdf(ARM.replace('<child link=\"b\"', '<child link=\"c\"'))",
        V,
        "'c'",
    ),
    R("robot_attach_no_slots", "Robot.from_urdf(ARM).attach('b', [[0, 0, 0, 0.1]])", V, "slots"),
    R(
        "fk_op_parents_out_of_range",
        "torch.ops.warpgeo.forward_kinematics(torch.zeros(2, 1), *FK_TABLES(parents=[5, 2**30]))",
        I,
        "parents",
        value=True,
    ),
    R(
        "fk_op_joint_index_out_of_range",
        "torch.ops.warpgeo.forward_kinematics(torch.zeros(2, 1), *FK_TABLES(joint_index=[-7, 2**30]))",
        I,
        "joint_index",
        value=True,
    ),
    R(
        "fk_op_sphere_links_out_of_range",
        "torch.ops.warpgeo.forward_kinematics(torch.zeros(2, 1), *FK_TABLES(sphere_links=[2**31 - 1]))",
        I,
        "sphere_links",
        value=True,
    ),
    R(
        "fk_op_origins_shape",
        "torch.ops.warpgeo.forward_kinematics(torch.zeros(2, 1), *FK_TABLES(origins=torch.zeros(2, 6)))",
        V,
        "origins",
    ),
    R(
        "fk_backward_op_grad_shape",
        "torch.ops.warpgeo.forward_kinematics_backward(torch.ones(2, 3, 7), None, torch.zeros(2, 1), "
        "torch.zeros(2, 2, 7), torch.zeros(2, 1, 4), *FK_TABLES())",
        V,
        "grad_poses",
    ),
    # ---- knn / ball_query / torch.ops.warpgeo.knn, ball_query
    R("knn_k0", "knn(torch.rand(1, 4, 3), torch.rand(1, 5, 3), 0)", V, "k"),
    R("knn_k_huge", "knn(torch.rand(1, 4, 3), torch.rand(1, 5, 3), 2**40)", V, "k"),
    R(
        "knn_dtype_mismatch",
        "knn(torch.rand(1, 4, 3), torch.rand(1, 5, 3, dtype=torch.float64), 2)",
        T,
        "points",
    ),
    R("knn_batch_mismatch", "knn(torch.rand(2, 4, 3), torch.rand(1, 5, 3), 2)", V, "points"),
    R("knn_nan", "knn(torch.rand(1, 4, 3), torch.full((1, 5, 3), float('nan')), 2)", V, "points", value=True),
    R(
        "knn_lengths_too_long",
        "knn(torch.rand(1, 4, 3), torch.rand(1, 5, 3), 2, point_lengths=torch.tensor([100]))",
        V,
        "point_lengths",
        value=True,
    ),
    R(
        "knn_op_lengths_short",
        "torch.ops.warpgeo.knn(torch.rand(4, 4, 3), torch.rand(4, 5, 3), None, torch.tensor([5]), 2)",
        V,
        "point_lengths",
    ),
    R(
        "ball_radius_nan",
        "ball_query(torch.rand(1, 4, 3), torch.rand(1, 5, 3), float('nan'), 3)",
        V,
        "radius",
    ),
    R("ball_radius_negative", "ball_query(torch.rand(1, 4, 3), torch.rand(1, 5, 3), -1.0, 3)", V, "radius"),
    R("ball_k_bool", "ball_query(torch.rand(1, 4, 3), torch.rand(1, 5, 3), 0.5, True)", T, "k"),
    R(
        "ball_op_lengths_short",
        "torch.ops.warpgeo.ball_query(torch.rand(4, 4, 3), torch.rand(4, 5, 3), torch.tensor([4]), None, 0.5, 3, True)",
        V,
        "query_lengths",
    ),
    # ---- sphere_mesh_cost / SdfMesh.apply / torch.ops.warpgeo.sphere_mesh_cost
    R("cost_world_str", "sphere_mesh_cost(SPH, 'world')", T, "world"),
    R("cost_width_3", "sphere_mesh_cost(torch.rand(2, 3, 3), W)", V, "spheres"),
    R("cost_int_spheres", "sphere_mesh_cost(torch.zeros(2, 3, 4, dtype=torch.int32), W)", T, "spheres"),
    R("cost_meta_spheres", "sphere_mesh_cost(torch.rand(2, 3, 4, device='meta'), W)", V, "spheres"),
    R("cost_nan", "sphere_mesh_cost(torch.full((2, 3, 4), float('nan')), W)", V, "spheres", value=True),
    R(
        "cost_env_out_of_range",
        "sphere_mesh_cost(SPH, W2, env_index=torch.tensor([0, 7]))",
        I,
        "env_index",
        value=True,
    ),
    R("cost_env_shape", "sphere_mesh_cost(SPH, W2, env_index=torch.tensor([0]))", V, "env_index"),
    R("cost_env_float", "sphere_mesh_cost(SPH, W2, env_index=torch.tensor([0.0, 1.0]))", T, "env_index"),
    R("cost_weight_negative", "sphere_mesh_cost(SPH, W, weight=-1.0)", V, "weight"),
    R(
        "cost_weight_negative_tensor",
        "sphere_mesh_cost(SPH, W, weight=torch.tensor(-1.0))",
        V,
        "weight",
        value=True,
    ),
    R("cost_weight_meta", "sphere_mesh_cost(SPH, W, weight=torch.tensor(1.0, device='meta'))", V, "weight"),
    R("cost_weight_beyond_float32", "sphere_mesh_cost(SPH, W, weight=1e39)", V, "weight"),
    R("cost_eta_inf", "sphere_mesh_cost(SPH, W, activation_distance=float('inf'))", V, "activation_distance"),
    R(
        "cost_eta_two_elements",
        "sphere_mesh_cost(SPH, W, activation_distance=torch.zeros(2))",
        V,
        "activation_distance",
    ),
    R("cost_max_distance_negative", "sphere_mesh_cost(SPH, W, max_distance=-1.0)", V, "max_distance"),
    OK(
        "cost_noncontiguous_last_dim",
        "sphere_mesh_cost(torch.stack([SPH, SPH], -1)[..., 0], W)",
        "torch.equal(r, sphere_mesh_cost(SPH, W))",
    ),
    OK("cost_empty", "sphere_mesh_cost(torch.zeros(0, 4), W)", "r.shape == (0,)"),
    OK(
        "cost_far_float64_radius_1e301",
        "sphere_mesh_cost(torch.tensor([[1e300, 0, 0, 1e301]], dtype=torch.float64), W)",
        "r.item() > 8e300",
    ),
    R(
        "cost_apply_env_short",
        "SdfMesh.apply(SPH, torch.tensor([0]), *ARGS2.values(), PARAMS, 0.0, False)",
        V,
        "env_index",
    ),
    # the world as declared inputs: forged / hostile world tensors through every entry point. A mesh id
    # that is no live mesh's must never reach Warp's mesh queries (it is a pointer they dereference)
    R(
        "cost_apply_forged_mesh_ids",
        "SdfMesh.apply(SPH, None, FORGE(ARGS, mesh_ids=lambda t: torch.full_like(t, 10**9)), False, PARAMS, 0.0, False)",
        V,
        "mesh_ids",
    ),
    R(
        "cost_op_mesh_ids_off_by_8",
        "torch.ops.warpgeo.sphere_mesh_cost(SPH, None, FORGE(ARGS2, mesh_ids=lambda t: t + 8 * (t != 0)), False, PARAMS, 0.0, False)",
        V,
        "mesh_ids",
    ),
    R(
        "cost_op_mesh_ids_written_in_place",
        "(lambda a: (a['world'][0].add_(16), torch.ops.warpgeo.sphere_mesh_cost(SPH, None, *a.values(), PARAMS, 0.0, False)))(MeshWorld([BOX]).kernel_args()._asdict())",
        V,
        "mesh_ids",
    ),
    R(
        "cost_op_mesh_ids_written_through_data",
        "(lambda a: (a['world'][0].data.add_(16), torch.ops.warpgeo.sphere_mesh_cost(SPH, None, *a.values(), PARAMS, 0.0, False)))(MeshWorld([BOX]).kernel_args()._asdict())",
        V,
        "mesh_ids",
    ),
    OK(
        "cost_op_mesh_ids_cloned",
        "torch.ops.warpgeo.sphere_mesh_cost(SPH, None, FORGE(ARGS2, mesh_ids=lambda t: t.clone()), False, PARAMS, 0.0, False)",
        "torch.equal(r[0], torch.ops.warpgeo.sphere_mesh_cost(SPH, None, *ARGS2.values(), PARAMS, 0.0, False)[0])",
    ),
    OK(
        "cost_op_world_args_outlive_their_world",
        "torch.ops.warpgeo.sphere_mesh_cost(SPH, None, *MeshWorld([BOX]).kernel_args(), PARAMS, 0.0, False)",
        "torch.equal(r[0], torch.ops.warpgeo.sphere_mesh_cost(SPH, None, *ARGS.values(), PARAMS, 0.0, False)[0])",
    ),
    R(
        "cost_op_mesh_ids_int32",
        "torch.ops.warpgeo.sphere_mesh_cost(SPH, None, FORGE(ARGS, mesh_ids=lambda t: t.int()), False, PARAMS, 0.0, False)",
        T,
        "mesh_ids",
    ),
    R(
        "cost_op_enabled_wider_than_mesh_ids",
        "torch.ops.warpgeo.sphere_mesh_cost(SPH, None, FORGE(ARGS, enabled=lambda t: torch.ones(1, 5, dtype=torch.int32)), False, PARAMS, 0.0, False)",
        V,
        "enabled",
    ),
    R(
        "cost_op_bounds_float64",
        "torch.ops.warpgeo.sphere_mesh_cost(SPH, None, FORGE(ARGS, bounds=lambda t: t.double()), False, PARAMS, 0.0, False)",
        T,
        "bounds",
    ),
    R(
        "cost_op_vertex_normals_strided",
        "torch.ops.warpgeo.sphere_mesh_cost(SPH, None, FORGE(ARGS2, vertex_normals=lambda t: torch.zeros(5, 6, dtype=torch.float64)[:, ::2]), False, PARAMS, 0.0, False)",
        V,
        "vertex_normals",
    ),
    R(
        "cost_op_world_short",
        "torch.ops.warpgeo.sphere_mesh_cost(SPH, None, ARGS['world'][:-1], False, PARAMS, 0.0, False)",
        T,
        "world",
    ),
    R(
        "cost_apply_world_str",
        "SdfMesh.apply(SPH, None, 'x', False, PARAMS, 0.0, False)",
        T,
        "world",
    ),
    R(
        "cost_apply_all_cuboids_int",
        "SdfMesh.apply(SPH, None, ARGS['world'], 1, PARAMS, 0.0, False)",
        T,
        "all_cuboids",
    ),
    OK(
        "cost_op_all_cuboids_forged_on_meshes",
        "torch.ops.warpgeo.sphere_mesh_cost(SPH, None, ARGS2['world'], True, PARAMS, 0.0, False)",
        "bool(torch.isfinite(r[0]).all())",
    ),
    OK(
        "cost_op_hostile_tables",
        "torch.ops.warpgeo.sphere_mesh_cost(SPH, None, FORGE(ARGS2, topo_offsets=lambda t: torch.full_like(t, 2**31 - 1), "
        "face_neighbors=lambda t: torch.full_like(t, -(2**31)), grid_dims=lambda t: torch.full_like(t, 2**31 - 1), "
        "cone_offsets=lambda t: torch.full_like(t, 7), grid_cells=lambda t: torch.full_like(t, -1e30)), False, PARAMS, 0.0, False)",
        "bool(torch.isfinite(r[0]).all())",
    ),
    R(
        "cost_apply_params_1",
        "SdfMesh.apply(SPH, None, *ARGS.values(), torch.zeros(1), 0.0, False)",
        V,
        "params",
    ),
    R(
        "cost_apply_params_float64",
        "SdfMesh.apply(SPH, None, *ARGS.values(), torch.zeros(2, dtype=torch.float64), 0.0, False)",
        T,
        "params",
    ),
    R(
        "cost_apply_other_worlds_poses",
        "SdfMesh.apply(SPH, None, FORGE(ARGS, inv_poses=lambda t: ARGS2['world'][1]), False, PARAMS, 0.0, False)",
        V,
        "inv_poses",
    ),
    R(
        "cost_apply_env_out_of_range",
        "SdfMesh.apply(SPH, torch.tensor([5, -3]), *ARGS2.values(), PARAMS, 0.0, False)",
        I,
        "env_index",
        value=True,
    ),
    R(
        "cost_op_env_short",
        "torch.ops.warpgeo.sphere_mesh_cost(SPH, torch.tensor([0]), *ARGS2.values(), PARAMS, 0.0, False)",
        V,
        "env_index",
    ),
    R(
        "cost_op_negative_params",
        "torch.ops.warpgeo.sphere_mesh_cost(SPH, None, *ARGS.values(), torch.tensor([0.0, -2.0]), 0.0, False)",
        V,
        "weight",
        value=True,
    ),
    # ---- swept_sphere_mesh_cost / SweptSdfMesh.apply / torch.ops.warpgeo.swept_sphere_mesh_cost
    R("swept_rank_3", "swept_sphere_mesh_cost(SPH, W)", V, "spheres"),
    R("swept_steps_negative", "swept_sphere_mesh_cost(TRAJ, W, sweep_steps=-1)", V, "sweep_steps"),
    R("swept_steps_2e31", "swept_sphere_mesh_cost(TRAJ, W, sweep_steps=2**31)", V, "sweep_steps"),
    R("swept_steps_float", "swept_sphere_mesh_cost(TRAJ, W, sweep_steps=2.0)", T, "sweep_steps"),
    R(
        "swept_apply_steps_2e40",
        "SweptSdfMesh.apply(TRAJ, None, *ARGS.values(), PARAMS, 2**40, False)",
        V,
        "sweep_steps",
    ),
    R(
        "swept_op_forged_mesh_ids",
        "torch.ops.warpgeo.swept_sphere_mesh_cost(TRAJ, None, FORGE(ARGS, mesh_ids=lambda t: t - 5), False, PARAMS, 4, False)",
        V,
        "mesh_ids",
    ),
    OK(
        "swept_across_float32_range",
        "swept_sphere_mesh_cost(torch.tensor([[[[-3e38, 0, 0, 0.1]], [[3e38, 0, 0, 0.1]]]]), W, sweep_steps=1)",
        "abs(r[0, 0, 0].item() - 0.3) < 1e-4",
    ),
    # ---- signed_distance / torch.ops.warpgeo.signed_distance
    R("sd_points_width_4", "signed_distance(torch.rand(5, 4), W)", V, "points"),
    R("sd_points_meta", "signed_distance(torch.rand(5, 3, device='meta'), W)", V, "points"),
    R("sd_inf", "signed_distance(torch.tensor([[float('inf'), 0, 0]]), W)", V, "points", value=True),
    R(
        "sd_op_forged_mesh_ids",
        "torch.ops.warpgeo.signed_distance(torch.rand(1, 5, 3), None, FORGE(ARGS2, mesh_ids=lambda t: t * 3), True, False)",
        V,
        "mesh_ids",
    ),
    OK(
        "sd_op_live_mesh_ids_in_other_slots",
        "torch.ops.warpgeo.signed_distance(torch.rand(1, 5, 3), None, FORGE(ARGS2, mesh_ids=lambda t: t.flip(1)), False, False)",
        "r[0].shape == (1, 5)",
    ),
    R(
        "sd_op_env_int16",
        "torch.ops.warpgeo.signed_distance(torch.rand(1, 5, 3), torch.zeros(1, dtype=torch.int16), *ARGS.values(), False)",
        T,
        "env_index",
    ),
    OK(
        "sd_far_1e18",
        "signed_distance(torch.tensor([[1e18, 0, 0]], dtype=torch.float64), W)",
        "abs(r.item() / 1e18 - 1) < 1e-6",
    ),
    OK(
        "sd_far_1e300",
        "signed_distance(torch.tensor([[1e300, 0, 0]], dtype=torch.float64), W)",
        "abs(r.item() / 1e300 - 1) < 1e-6",
    ),
    OK(
        "sd_degenerate_faces",
        "degenerate_distance()",
        "abs(r - 1.0) < 1e-5",
    ),
    # ---- sphere_collision / torch.ops.warpgeo.sphere_collision
    R("coll_width_3", "sphere_collision(torch.rand(5, 3), W)", V, "spheres"),
    R("coll_int", "sphere_collision(torch.zeros(5, 4, dtype=torch.int32), W)", T, "spheres"),
    R("coll_world_none", "sphere_collision(SPH, None)", T, "world"),
    R("coll_nan", "sphere_collision(torch.tensor([[float('nan'), 0, 0, 0.1]]), W)", V, "spheres", value=True),
    R(
        "coll_op_forged_mesh_ids",
        "torch.ops.warpgeo.sphere_collision(SPH, None, FORGE(ARGS2, mesh_ids=lambda t: t * 3), False)",
        V,
        "mesh_ids",
    ),
    R(
        "coll_op_env_out_of_range",
        "torch.ops.warpgeo.sphere_collision(SPH, torch.tensor([5, -3]), *ARGS2.values())",
        I,
        "env_index",
        value=True,
    ),
    R(
        "coll_op_width_3",
        "torch.ops.warpgeo.sphere_collision(torch.rand(1, 5, 3), None, *ARGS.values())",
        V,
        "spheres",
    ),
    OK(
        "coll_op_forged_grids",
        "torch.ops.warpgeo.sphere_collision(SPH, None, FORGE(ARGS2, grid_dims=lambda t: t + 10**6), False)",
        "r.shape == (2, 3)",
    ),
    OK(
        "coll_far_and_huge",
        "sphere_collision(torch.tensor([[1e18, 0, 0, 2e18], [3e38, 0, 0, 1.0]], dtype=torch.float64), W)",
        "r.tolist() == [True, False]",
    ),
    # ---- closest_point / torch.ops.warpgeo.closest_point
    R("cp_width_4", "closest_point(torch.rand(5, 4), W)", V, "points"),
    R("cp_inf", "closest_point(torch.tensor([[float('inf'), 0, 0]]), W)", V, "points", value=True),
    R(
        "cp_op_forged_mesh_ids",
        "torch.ops.warpgeo.closest_point(torch.rand(1, 5, 3), None, FORGE(ARGS2, mesh_ids=lambda t: t * 3), False)",
        V,
        "mesh_ids",
    ),
    R(
        "cp_op_env_int16",
        "torch.ops.warpgeo.closest_point(torch.rand(1, 5, 3), torch.zeros(1, dtype=torch.int16), *ARGS.values())",
        T,
        "env_index",
    ),
    OK(
        "cp_op_forged_tables",
        "torch.ops.warpgeo.closest_point(torch.rand(1, 5, 3), None, "
        "FORGE(ARGS2, topo_offsets=lambda t: t + 10**6, cone_offsets=lambda t: t + 10**6), False)",
        "r[0].shape == (1, 5, 3) and bool(torch.isfinite(r[1]).all())",
    ),
    OK(
        "cp_far_1e300",
        "ClosestPoint(*closest_point(torch.tensor([[1e300, 0, 0]], dtype=torch.float64), W))",
        "abs(r.distance.item() / 1e300 - 1) < 1e-6 and r.entry.item() == 0 and r.point.tolist() == [[0.5, 0, 0]]",
    ),
    # ---- swept_sphere_mesh_cost's speed metric
    R("swept_dt_zero", "swept_sphere_mesh_cost(TRAJ, W, speed_metric=True, dt=0.0)", V, "dt"),
    R("swept_dt_str", "swept_sphere_mesh_cost(TRAJ, W, speed_metric=True, dt='1')", T, "dt"),
    R(
        "swept_dt_tensor_negative",
        "swept_sphere_mesh_cost(TRAJ, W, speed_metric=True, dt=torch.tensor(-1.0))",
        V,
        "dt",
        value=True,
    ),
    R("swept_speed_metric_str", "swept_sphere_mesh_cost(TRAJ, W, speed_metric='yes')", T, "speed_metric"),
    # ---- raycast / torch.ops.warpgeo.raycast, and the sensors (camera_rays, render_depth, lidar_rays, grid_rays)
    R("ray_origins_width_4", "raycast(W, torch.rand(5, 4), torch.rand(5, 3))", V, "origins"),
    R("ray_directions_width_2", "raycast(W, torch.rand(5, 3), torch.rand(5, 2))", V, "directions"),
    R("ray_no_broadcast", "raycast(W, torch.rand(5, 3), torch.rand(4, 3))", V, "broadcast"),
    R(
        "ray_dtypes_differ",
        "raycast(W, torch.rand(5, 3), torch.rand(5, 3, dtype=torch.float64))",
        T,
        "directions",
    ),
    R("ray_int_origins", "raycast(W, torch.ones(5, 3, dtype=torch.int64), torch.rand(5, 3))", T, "origins"),
    R(
        "ray_meta",
        "raycast(W, torch.rand(5, 3, device='meta'), torch.rand(5, 3, device='meta'))",
        V,
        "origins",
    ),
    R("ray_world_not_a_world", "raycast(ARGS, torch.rand(5, 3), torch.rand(5, 3))", T, "world"),
    R(
        "ray_zero_direction",
        "raycast(W, torch.rand(2, 3), torch.tensor([[1.0, 0, 0], [0, 0, 0]]))",
        V,
        "directions",
        value=True,
    ),
    R(
        "ray_nan_origin",
        "raycast(W, torch.tensor([[float('nan'), 0, 0]]), torch.rand(1, 3))",
        V,
        "origins",
        value=True,
    ),
    R(
        "ray_inf_direction",
        "raycast(W, torch.rand(1, 3), torch.tensor([[float('inf'), 0, 0]]))",
        V,
        "directions",
        value=True,
    ),
    R(
        "ray_max_distance_negative",
        "raycast(W, torch.rand(1, 3), torch.rand(1, 3), max_distance=-1.0)",
        V,
        "max_distance",
    ),
    R(
        "ray_max_distance_nan",
        "raycast(W, torch.rand(1, 3), torch.rand(1, 3), max_distance=float('nan'))",
        V,
        "max_distance",
    ),
    R(
        "ray_max_distance_str",
        "raycast(W, torch.rand(1, 3), torch.rand(1, 3), max_distance='far')",
        T,
        "max_distance",
    ),
    R(
        "ray_env_index_out_of_range",
        "raycast(W2, torch.rand(2, 4, 3), torch.rand(2, 4, 3), env_index=torch.tensor([0, 2]))",
        I,
        "env_index",
        value=True,
    ),
    R(
        "ray_env_index_negative",
        "raycast(W2, torch.rand(2, 4, 3), torch.rand(2, 4, 3), env_index=torch.tensor([-1, 0]))",
        I,
        "env_index",
        value=True,
    ),
    R(
        "ray_env_index_float",
        "raycast(W2, torch.rand(2, 4, 3), torch.rand(2, 4, 3), env_index=torch.zeros(2))",
        T,
        "env_index",
    ),
    R(
        "ray_op_forged_mesh_ids",
        "torch.ops.warpgeo.raycast(torch.rand(1, 5, 3), torch.rand(1, 5, 3), None, FORGE(ARGS2, mesh_ids=lambda t: t * 3), False, 1.0)",
        V,
        "mesh_ids",
    ),
    R(
        "ray_op_short_world_bounds",
        "torch.ops.warpgeo.raycast(torch.rand(1, 5, 3), torch.rand(1, 5, 3), None, FORGE(ARGS, world_bounds=lambda t: t[:, :, :1]), False, 1.0)",
        V,
        "world_bounds",
    ),
    R(
        "ray_op_shapes_differ",
        "torch.ops.warpgeo.raycast(torch.rand(1, 5, 3), torch.rand(1, 4, 3), None, *ARGS.values(), 1.0)",
        V,
        "directions",
    ),
    R(
        "ray_op_env_int16",
        "torch.ops.warpgeo.raycast(torch.rand(1, 5, 3), torch.rand(1, 5, 3), torch.zeros(1, dtype=torch.int16), *ARGS.values(), 1.0)",
        T,
        "env_index",
    ),
    R(
        "ray_op_max_distance_negative",
        "torch.ops.warpgeo.raycast(torch.rand(1, 5, 3), torch.rand(1, 5, 3), None, *ARGS.values(), -1.0)",
        V,
        "max_distance",
    ),
    OK(
        "ray_result_is_RayHits",
        "isinstance(raycast(W0, torch.tensor([-3.0, 0, 0]), torch.tensor([1.0, 0, 0])), RayHits)",
        "r is True",
    ),
    OK(
        "ray_far_origin_1e30",
        "raycast(W0, torch.tensor([-1e30, 0.0, 0.0]), torch.tensor([1.0, 0.0, 0.0])).distance",
        "abs(r.item() / 1e30 - 1) < 1e-6",
    ),
    OK(
        "ray_huge_direction",
        "raycast(W0, torch.tensor([-2.0, 0.1, 0.2]), torch.tensor([3e38, 0.0, 0.0])).distance",
        "abs(r.item() - 1.5) < 1e-5",
    ),
    OK(
        "ray_tiny_direction",
        "raycast(W0, torch.tensor([-2.0, 0.1, 0.2]), torch.tensor([1e-44, 0.0, 0.0])).distance",
        "abs(r.item() - 1.5) < 1e-5",
    ),
    OK(
        "ray_float16",
        "raycast(W0, torch.tensor([-2.0, 0.1, 0.2], dtype=torch.float16), torch.tensor([1.0, 0, 0], dtype=torch.float16)).distance",
        "r.dtype == torch.float16 and abs(r.item() - 1.5) < 1e-2",
    ),
    OK("ray_no_rays", "raycast(W0, torch.rand(0, 3), torch.rand(0, 3)).distance", "r.shape == (0,)"),
    R("cam_width_float", "camera_rays(torch.eye(3), 4.0, 3, IDENTITY)", T, "width"),
    R("cam_height_zero", "camera_rays(torch.eye(3), 4, 0, IDENTITY)", V, "height"),
    R("cam_pose_6", "camera_rays(torch.eye(3), 4, 3, [0.0] * 6)", V, "camera_pose"),
    R("cam_intrinsics_5", "camera_rays(torch.rand(5), 4, 3, IDENTITY)", V, "intrinsics"),
    R("cam_intrinsics_str", "camera_rays('K', 4, 3, IDENTITY)", T, "intrinsics"),
    R("cam_zero_focal", "camera_rays([0.0, 1.0, 1.0, 1.0], 4, 3, IDENTITY)", V, "intrinsics", value=True),
    R(
        "depth_zero_quaternion",
        "render_depth(W0, torch.eye(3), 4, 3, [0.0, 0, -2, 0, 0, 0, 0])",
        V,
        "quaternion",
        value=True,
    ),
    R("depth_poses_rank_3", "render_depth(W0, torch.eye(3), 4, 3, torch.zeros(1, 1, 7))", V, "camera_pose"),
    R(
        "depth_env_index_out_of_range",
        "render_depth(W2, torch.eye(3), 4, 3, [IDENTITY], env_index=torch.tensor([5]))",
        I,
        "env_index",
        value=True,
    ),
    R("lidar_channels_zero", "lidar_rays(0, 8)", V, "channels"),
    R("lidar_samples_bool", "lidar_rays(4, True)", T, "horizontal_samples"),
    R("lidar_fov_reversed", "lidar_rays(4, 8, vertical_fov=(10.0, -10.0))", V, "vertical_fov"),
    R("lidar_pose_5", "lidar_rays(4, 8, pose=[0.0] * 5)", V, "pose"),
    R("grid_resolution_zero", "grid_rays((1.0, 1.0), 0.0)", V, "resolution"),
    R("grid_size_negative", "grid_rays((1.0, -1.0), 0.1)", V, "size"),
    R("grid_direction_zero", "grid_rays((1.0, 1.0), 0.1, direction=(0.0, 0.0, 0.0))", V, "direction"),
    # ---- MeshWorld: constructor, from_envs, set_poses, set_enabled, kernel_args
    R(
        "world_cuda_without_cuda",
        "MeshWorld([BOX], device='cuda' if not torch.cuda.is_available() else 'cuda:999')",
        V,
        "device",
    ),
    R("world_device_nonsense", "MeshWorld([BOX], device='nonsense')", V, "device"),
    R("world_device_meta", "MeshWorld([BOX], device='meta')", V, "device"),
    R("world_device_none", "MeshWorld([BOX], device=None)", T, "device"),
    R(
        "world_meta_vertices",
        "MeshWorld([(torch.empty(8, 3, device='meta'), torch.as_tensor(BOX.faces))])",
        V,
        "vertices",
    ),
    R("world_complex_vertices", "MeshWorld([(np.asarray(BOX.vertices) + 0j, BOX.faces)])", T, "vertices"),
    R("world_vertex_1e39", "MeshWorld([(np.asarray(BOX.vertices) * 2e39, BOX.faces)])", V, "vertices"),
    R(
        "world_vertex_beyond_2_60",
        "MeshWorld([(np.asarray(BOX.vertices) * 2.0**62, BOX.faces)])",
        V,
        "vertex",
    ),
    R(
        "world_int64_vertex_most_negative",  # its abs wraps to itself in int64: it once passed as small
        "MeshWorld([(np.where(np.arange(24).reshape(8, 3) == 5, np.iinfo(np.int64).min, "
        "(np.asarray(BOX.vertices) * 10).astype(np.int64)), BOX.faces)])",
        V,
        "vertex",
    ),
    R(
        "world_nan_vertex",
        "MeshWorld([(np.where(np.arange(24).reshape(8, 3) == 5, np.nan, BOX.vertices), BOX.faces)])",
        V,
        "vertices",
    ),
    R("world_faces_out_of_range", "MeshWorld([(BOX.vertices, BOX.faces + 8)])", I, "face"),
    R("world_faces_float", "MeshWorld([(BOX.vertices, BOX.faces.astype(float))])", T, "faces"),
    R("world_vertices_2d", "MeshWorld([(np.zeros((8, 2)), BOX.faces)])", V, "vertices"),
    R("world_no_meshes", "MeshWorld([])", V, "mesh"),
    R("world_single_mesh_unwrapped", "MeshWorld(BOX)", T, "meshes"),
    R("world_sign_method", "MeshWorld([BOX], sign_method='magic')", V, "sign_method"),
    R("world_missing_file", "MeshWorld([os.path.join(TMP, 'missing.obj')])", V, "meshes[0]"),
    R("world_corrupt_stl", "MeshWorld([os.path.join(TMP, 'corrupt.stl')])", V, "meshes[0]"),
    R("world_corrupt_obj", "MeshWorld([os.path.join(TMP, 'corrupt.obj')])", V, "meshes[0]"),
    R(
        "world_complex_poses",
        "MeshWorld([BOX], poses=np.array([[0, 0, 0, 1, 0, 0, 0]], dtype=complex))",
        T,
        "poses",
    ),
    R("from_envs_empty", "MeshWorld.from_envs([])", V, "envs"),
    R("from_envs_flat", "MeshWorld.from_envs([BOX])", T, "envs[0]"),
    R(
        "from_envs_ragged_poses",
        "MeshWorld.from_envs([[BOX], [BOX, BOX]], poses=[[IDENTITY], [IDENTITY] * 3])",
        V,
        "poses[1]",
    ),
    R("set_poses_meta", "W.set_poses(torch.empty(1, 7, device='meta'))", V, "poses"),
    R("set_poses_complex", "W.set_poses(torch.tensor([IDENTITY], dtype=torch.complex64))", T, "poses"),
    R("set_poses_strings", "W.set_poses([['a'] * 7])", T, "poses"),
    R("set_poses_shape", "W.set_poses(torch.zeros(2, 7))", V, "poses"),
    R("set_poses_nan", "W.set_poses([[float('nan'), 0, 0, 1, 0, 0, 0]])", V, "poses", value=True),
    R("set_poses_quaternion_zero", "W.set_poses([[0, 0, 0, 0, 0, 0, 0]])", V, "poses", value=True),
    R("set_enabled_float", "W.set_enabled(torch.ones(1))", T, "mask"),
    R("set_enabled_meta", "W.set_enabled(torch.ones(1, dtype=torch.bool, device='meta'))", V, "mask"),
    R("set_enabled_strings", "W.set_enabled(['a'])", T, "mask"),
    R("set_enabled_shape", "W.set_enabled([True, False])", V, "mask"),
    R("kernel_args_int_dtype", "W.kernel_args(torch.int32)", T, "dtype"),
    # ---- issue 27: huge Python ints (never OverflowError), max_distance=inf, set_enabled's 0/1, far scales
    R("ball_radius_10e400", "ball_query(torch.rand(1, 4, 3), torch.rand(1, 5, 3), 10**400, 3)", V, "radius"),
    R("knn_k_10e30_no_queries", "knn(torch.rand(1, 0, 3), torch.rand(1, 5, 3), 10**30)", V, "k"),
    R(
        "fps_start_10e30",
        "farthest_point_sampling(torch.rand(5, 3), 2, start_index=10**30)",
        I,
        "start_index",
    ),
    R("fps_k_list_10e30", "farthest_point_sampling(torch.rand(2, 5, 3), [10**30, 1])", V, "num_samples"),
    R("cost_weight_10e400", "sphere_mesh_cost(SPH, W, weight=10**400)", V, "weight"),
    R("cost_eta_10e400", "sphere_mesh_cost(SPH, W, activation_distance=10**400)", V, "activation_distance"),
    R("cost_max_distance_10e400", "sphere_mesh_cost(SPH, W, max_distance=10**400)", V, "max_distance"),
    R("swept_weight_10e400", "swept_sphere_mesh_cost(TRAJ, W, weight=10**400)", V, "weight"),
    R("set_poses_10e400", "W.set_poses([[10**400, 0, 0, 1, 0, 0, 0]])", V, "poses"),
    R("world_sign_method_nested", "MeshWorld([BOX, BOX], sign_method=[['ray'], ['ray']])", V, "sign_method"),
    # ---- issue 25: analytic primitives (warpgeo.primitives) as world entries
    R("sphere_negative_radius", "Sphere(-1.0)", V, "radius"),
    R("sphere_str_radius", "Sphere('1')", T, "radius"),
    R("sphere_radius_1e200", "Sphere(1e200)", V, "radius"),
    R("capsule_nan_length", "Capsule(0.1, float('nan'))", V, "length"),
    R("cylinder_bool_height", "Cylinder(0.1, True)", T, "height"),
    R("cuboid_two_dims", "Cuboid([1.0, 2.0])", V, "dims"),
    R("cuboid_zero_dim", "Cuboid(torch.tensor([1.0, 0.0, 1.0]))", V, "dims[1]"),
    R("cuboid_complex_dims", "Cuboid(np.array([1, 2, 3]) + 0j)", T, "dims"),
    R("world_primitive_base_class", "MeshWorld([warpgeo.primitives.Primitive()])", T, "meshes[0]"),
    OK(
        "distance_primitives_far_points",
        "signed_distance(torch.tensor([[1e30, -1e30, 3e38], [0.0, 0, 0]]), "
        "MeshWorld([Sphere(0.5), Capsule(0.1, 1.0), Cylinder(0.2, 0.3), Cuboid([1, 2, 3])]))",
        "bool((r[0] > 1e29).all() and r[1] == -0.5)",
    ),
    OK(
        "cost_op_primitive_flags_forged",
        "(lambda a: torch.ops.warpgeo.sphere_mesh_cost(SPH, None, FORGE(a, grid_flags=lambda t: t ^ 31), "
        "a['all_cuboids'], PARAMS, 0.0, False))(MeshWorld([Sphere(0.5), Capsule(0.1, 1.0)]).kernel_args()._asdict())",
        "bool(torch.isfinite(r[0]).all())",
    ),
    OK(
        "cost_op_primitive_read_as_mesh",  # kind bits cleared: the slot's box mesh is queried (a live mesh)
        "(lambda a: torch.ops.warpgeo.sphere_mesh_cost(SPH, None, FORGE(a, grid_flags=lambda t: t & 1), "
        "False, PARAMS, 0.0, False))(MeshWorld([Sphere(0.5), Capsule(0.1, 1.0)]).kernel_args()._asdict())",
        "bool(torch.isfinite(r[0]).all())",
    ),
    OK(
        "cost_max_distance_inf",
        "sphere_mesh_cost(SPH, W0, max_distance=float('inf'))",
        "torch.equal(r, sphere_mesh_cost(SPH, W0))",
    ),
    OK(
        "cost_eta_1e20",
        "sphere_mesh_cost(torch.tensor([[3.0, 0.0, 0.0, 0.5]]), W0, activation_distance=1e20)",
        "torch.isfinite(r).all() and abs(r.item() / 5e19 - 1) < 1e-5",
    ),
    OK(
        "cost_eta_3e38_float32",
        "sphere_mesh_cost(torch.tensor([[3.0, 0.0, 0.0, 0.5]]), W0, activation_distance=3e38)",
        "torch.isfinite(r).all() and abs(r.item() / 1.5e38 - 1) < 1e-5",
    ),
    R("set_enabled_2", "W.set_enabled([2])", V, "mask"),
    R("set_enabled_minus_1", "W.set_enabled(np.array([-1]))", V, "mask"),
    R("set_enabled_tensor_2", "W.set_enabled(torch.tensor([2]))", V, "mask", value=True),
    OK("set_enabled_0_1", "W.set_enabled(torch.tensor([1]))", "W.enabled.tolist() == [[True]]"),
    OK(
        "knn_float64_1e200",
        "knn(CLOUD64[None, :2] * 1e200, CLOUD64[None] * 1e200, 3)",
        "r.idx.tolist() == [[[0, 1, 6], [1, 0, 6]]] and torch.allclose(r.dists[0, 0], "
        "torch.tensor([0.0, 1e200, 3**0.5 * 1e200], dtype=torch.float64), rtol=1e-12)",
    ),
    OK(
        "ball_query_float64_1e-200",
        "ball_query(CLOUD64[None, :1] * 1e-200, CLOUD64[None] * 1e-200, 1.8e-200, 4)",
        "r.tolist() == [[[0, 1, 6, -1]]]",
    ),
    OK("load_ops", "load_ops()", "hasattr(torch.ops.warpgeo, 'knn')"),
    OK("torch_ops_lookup", "torch.ops.warpgeo.knn", "r is torch.ops.warpgeo.knn"),
    # ---- the command line (cli.main, in the same process; `python -m warpgeo` once below)
    OK(
        "cli_sample_k_1e9",
        "cli(['sample', BOX_OBJ, '-k', '1000000000', '-o', OUT_NPY])",
        "r[0] == 2 and r[1].count(chr(10)) == 1 and '-k' in r[1]",
    ),
    OK(
        "cli_sample_surface_samples_huge",
        "cli(['sample', BOX_OBJ, '--surface-samples', str(10**11), '-o', OUT_NPY])",
        "r[0] == 2 and '--surface-samples' in r[1]",
    ),
    OK("cli_sample_k_0", "cli(['sample', BOX_OBJ, '-k', '0', '-o', OUT_NPY])", "r[0] == 2 and '-k' in r[1]"),
    OK(
        "cli_sample_corrupt_stl",
        "cli(['sample', os.path.join(TMP, 'corrupt.stl'), '-o', OUT_NPY])",
        "r[0] == 2 and 'corrupt.stl' in r[1] and 'charset' not in r[1]",
    ),
    OK(
        "cli_sample_corrupt_obj",
        "cli(['sample', os.path.join(TMP, 'corrupt.obj'), '-o', OUT_NPY])",
        "r[0] == 2 and 'corrupt.obj' in r[1] and 'charset' not in r[1]",
    ),
    OK(
        "cli_sdf_complex_npy",
        "cli(['sdf', BOX_OBJ, os.path.join(TMP, 'complex.npy'), '-o', OUT_NPY])",
        "r[0] == 2 and 'complex' in r[1]",
    ),
    OK(
        "cli_sdf_nan_npy",
        "cli(['sdf', BOX_OBJ, os.path.join(TMP, 'nan.npy'), '-o', OUT_NPY])",
        "r[0] == 2 and 'NaN' in r[1]",
    ),
    OK(
        "cli_bad_device",
        "cli(['sample', BOX_OBJ, '--device', 'tpu', '-o', OUT_NPY])",
        "r[0] == 2 and 'device' in r[1]",
    ),
    # ---- DistanceGrid / GridQuery / DepthFusion and their ops (torch.ops.warpgeo.distance_grid_*, depth_fusion_*)
    R("grid_int_values", "DistanceGrid(torch.zeros(2, 2, 2, dtype=torch.int64), 0.1)", T, "values"),
    R("grid_2d_values", "DistanceGrid(torch.zeros(2, 2), 0.1)", V, "values"),
    R("grid_voxel_zero", "DistanceGrid(torch.zeros(2, 2, 2), 0.0)", V, "voxel_size"),
    R("grid_nan_values", "DistanceGrid(torch.full((2, 2, 2), float('nan')), 0.1)", V, "values", value=True),
    R(
        "grid_query_nan",
        "DistanceGrid(torch.zeros(2, 2, 2), 0.1).query(torch.tensor([[float('nan'), 0.0, 0.0]]))",
        V,
        "points",
        value=True,
    ),
    OK(
        "grid_query_far",
        "GridQuery(*DistanceGrid(torch.zeros(2, 2, 2), 0.1).query(torch.tensor([[3e38, -3e38, 0.0]])))",
        "isinstance(r, GridQuery) and not bool(torch.isnan(r.distance).any())",
    ),
    R(
        "grid_op_query_values_2d",
        "torch.ops.warpgeo.distance_grid_query(torch.zeros(4, 3), torch.zeros(2, 2), 0.1, [0.0, 0.0, 0.0])",
        V,
        "values",
    ),
    R(
        "grid_op_query_voxel",
        "torch.ops.warpgeo.distance_grid_query(torch.zeros(4, 3), torch.zeros(2, 2, 2), -1.0, [0.0, 0.0, 0.0])",
        V,
        "voxel_size",
    ),
    R(
        "grid_op_occupancy_float",
        "torch.ops.warpgeo.distance_grid_from_occupancy(torch.zeros(3, 3, 3), 0.1, torch.float32)",
        T,
        "occupied",
    ),
    R(
        "grid_op_points_dims",
        "torch.ops.warpgeo.distance_grid_from_points(torch.rand(5, 3), [4, 4, 0], [0.0, 0.0, 0.0], 0.1, torch.float32)",
        V,
        "dims",
    ),
    OK(
        "grid_op_points_outside",
        "torch.ops.warpgeo.distance_grid_from_points(torch.tensor([[1e30, -1e30, 5.0], [0.1, 0.1, 0.1]]), [4, 4, 4], [0.0, 0.0, 0.0], 0.1, torch.float32)",
        "r.shape == (4, 4, 4) and float(r[1, 1, 1]) == 0.0",
    ),
    R(
        "fusion_op_weight_shape",
        "torch.ops.warpgeo.depth_fusion_integrate(torch.ones(4, 4, 4), torch.zeros(4, 4, 3), torch.ones(1, 8, 8), torch.eye(3)[None], torch.tensor([IDENTITY]), [0.0, 0.0, 0.0], 0.1, 0.4, float('inf'))",
        V,
        "weight",
    ),
    R(
        "fusion_op_zero_focal",
        "torch.ops.warpgeo.depth_fusion_integrate(torch.ones(4, 4, 4), torch.zeros(4, 4, 4), torch.ones(1, 8, 8), torch.zeros(1, 3, 3), torch.tensor([IDENTITY]), [0.0, 0.0, 0.0], 0.1, 0.4, float('inf'))",
        V,
        "intrinsics",
        value=True,
    ),
    R(
        "fusion_op_distance_weight_dtype",
        "torch.ops.warpgeo.depth_fusion_distance(torch.ones(4, 4, 4), torch.zeros(4, 4, 4, dtype=torch.float64), 0.1, 0.4, torch.float32)",
        T,
        "weight",
    ),
    R("fusion_bounds_inverted", "DepthFusion(((0, 0, 0), (-1, 1, 1)), 0.1)", V, "bounds"),
    R(
        "fusion_pose_not_unit",
        "DepthFusion(((0, 0, 0), (1, 1, 1)), 0.1).integrate(torch.ones(8, 8), torch.eye(3), [0, 0, 0, 2, 0, 0, 0])",
        V,
        "camera_pose",
        value=True,
    ),
    OK(
        "fusion_nan_depth",
        "DepthFusion(((0, 0, 0), (1, 1, 1)), 0.1).integrate(torch.full((8, 8), float('nan')), torch.eye(3), IDENTITY)",
    ),
    # ---- a DistanceGrid in a world: NaN values, forged voxel rows, set_grid
    R(
        "world_grid_nan",
        "signed_distance(torch.rand(1, 5, 3), MeshWorld([DistanceGrid(torch.full((2, 2, 2), float('nan')), 0.1)]))",
        V,
        "values",
        value=True,
    ),
    OK(
        "world_grid_forged_rows",
        "torch.ops.warpgeo.signed_distance(torch.full((1, 2, 3), 0.05), None, FORGE(MeshWorld([DistanceGrid(torch.ones(2, 2, 2), 0.1)]).kernel_args()._asdict(), voxel_dims=lambda t: t * 1000 + 7), True, False)",
        "r[0].flatten().tolist() == [0.0, 0.0]",
    ),
    OK(
        "world_grid_forged_kind",
        "torch.ops.warpgeo.signed_distance(torch.rand(1, 4, 3), None, FORGE(ARGS, slot_kind=lambda t: t + 5), True, False)",
        "r[0].shape == (1, 4)",
    ),
    R(
        "world_set_grid_shape",
        "MeshWorld({'map': DistanceGrid(torch.ones(2, 2, 2), 0.1)}).set_grid('map', torch.ones(2, 2, 3))",
        V,
        "shape",
    ),
    R(
        "world_set_grid_nan",
        "MeshWorld({'map': DistanceGrid(torch.ones(2, 2, 2), 0.1)}).set_grid('map', torch.full((2, 2, 2), float('nan')))",
        V,
        "values",
        value=True,
    ),
]

#: What every case may use. charset_normalizer is hidden so that trimesh's "guess the text encoding" path
#: (taken for corrupt files) fails the way it does where that optional module is not installed.
_PRELUDE = r"""
import contextlib, io, json, os, sys, traceback
sys.modules["charset_normalizer"] = None
import numpy as np
import torch
import trimesh
import warpgeo
from warpgeo import *
from warpgeo.cli import main as _cli_main

TMP = os.environ["WARPGEO_ROBUSTNESS_TMP"]
BOX = trimesh.creation.box((1.0, 1.0, 1.0))
BOX_OBJ = os.path.join(TMP, "box.obj")
OUT_NPY = os.path.join(TMP, "out.npy")
IDENTITY = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
W = MeshWorld([BOX])
W0 = MeshWorld([BOX])  # never changed by a case (W is: set_poses / set_enabled with value checks off)
W2 = MeshWorld.from_envs([[BOX], [BOX, trimesh.creation.icosphere()]])
ARGS = W.kernel_args()._asdict()  # {"world": [tensors of warpgeo.world.WORLD_FIELDS], "all_cuboids": bool}
ARGS2 = W2.kernel_args()._asdict()


def FORGE(args, **change):
    # args' world list, each field named in change replaced by change[name](field)
    names = list(warpgeo.world.WORLD_FIELDS)
    world = list(args["world"])
    for name, make in change.items():
        world[names.index(name)] = make(world[names.index(name)])
    return world
ARM = '<robot name="r"><link name="a"/><link name="b"/><joint name="j" type="revolute"><parent link="a"/><child link="b"/><axis xyz="0 0 1"/><limit lower="-1" upper="1" effort="1" velocity="1"/></joint></robot>'


def FK_TABLES(**change):
    # the tables of torch.ops.warpgeo.forward_kinematics for a two-link arm and one sphere, some replaced
    tables = dict(
        parents=[-1, 0], joint_types=[0, 1], joint_index=[-1, 0], axes=torch.tensor([[0.0, 0, 1]] * 2),
        origins=torch.tensor([IDENTITY] * 2), mimic=torch.tensor([[1.0, 0.0]] * 2), sphere_links=[1],
        local_spheres=torch.tensor([[0.1, 0, 0, 0.05]]),
    )
    tables.update(change)
    return [torch.tensor(v, dtype=torch.int32) if isinstance(v, list) else v for v in tables.values()]
PARAMS = torch.tensor([0.0, 1.0])
SPH = torch.tensor([[[0.6, 0.0, 0.0, 0.2], [0.0, 0.0, 0.0, 0.1], [3.0, 0.0, 0.0, 0.5]]] * 2)
TRAJ = torch.tensor([[[[-1.0, 0.0, 0.0, 0.05]], [[1.0, 0.0, 0.0, 0.05]]]])
FEAT = torch.rand(2, 3, 5)
IDX = torch.tensor([[0, 4, -1, 2], [1, 1, 3, 0]])
CLOUD64 = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0.3, 2, 0], [5, 5, 1], [2, -1, 3], [-4, 0.5, 0.25], [1, 1, 1]],
                       dtype=torch.float64)
# 4 GiB of address space, never touched but where gathered: two rows of 2**30 half floats (2 GiB each)
BIG_HALF = torch.empty(2, 1, 2**30, dtype=torch.float16)
BIG_HALF[0, 0, 5] = 1.5
BIG_HALF[1, 0, 2**30 - 1] = -2.5


def cli(argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = _cli_main(argv)
    return code, err.getvalue()


def degenerate_distance():
    # three collinear vertices: a mesh whose only face has zero area; either refused naming the mesh or
    # its distance is the distance to the segment
    try:
        world = MeshWorld([(np.array([[0.0, 0, 0], [1, 0, 0], [2, 0, 0]]), np.array([[0, 1, 2]]))])
    except ValueError as exc:
        if "meshes[0]" not in str(exc):
            raise
        return 1.0
    return signed_distance(torch.tensor([[0.5, 1.0, 0.0]]), world).item()
"""

_RUNNER = r"""
cases = json.load(open(sys.argv[1]))
start = int(sys.argv[2])
warpgeo.set_value_checks(sys.argv[3] == "on")
for i in range(start, len(cases)):
    name, code, check = cases[i]
    print(json.dumps({"start": i}), flush=True)
    out = {"i": i}
    try:
        r = eval(code)
        out["status"] = "ok"
        if check is not None:
            try:
                out["check"] = bool(eval(check))
            except Exception as exc:
                out["check"] = False
                out["check_error"] = f"{type(exc).__name__}: {exc}"
            if not out["check"]:
                out["got"] = repr(r)[:300]
    except Exception as exc:
        out["status"] = "raised"
        out["type"] = type(exc).__name__
        out["msg"] = str(exc)[:500]
        out["where"] = traceback.format_exc().splitlines()[-3][:300]
    print(json.dumps(out), flush=True)
"""


def _write_files(tmp: Path) -> None:
    trimesh.creation.box((1.0, 1.0, 1.0)).export(tmp / "box.obj")
    (tmp / "corrupt.stl").write_bytes(b"garbage\x00\x01\x02 not an stl at all \xff\xfe")
    (tmp / "corrupt.obj").write_bytes(b"\xff\xfe\x00v 1 2 \x81\x82 garbage")
    np.save(tmp / "complex.npy", np.ones((5, 3), dtype=np.complex128))
    np.save(tmp / "nan.npy", np.full((5, 3), np.nan))


def _pythonpath() -> str:
    """The project root first, then whatever PYTHONPATH already holds (where a machine keeps its packages)."""
    return os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


def _run_cases(mode: str, tmp: Path) -> dict[str, dict]:
    """Run every case in subprocesses (resumed after a crash); the outcome of each case by name."""
    (tmp / "cases.json").write_text(json.dumps([(c.name, c.code, c.check) for c in CASES]))
    script = tmp / "runner.py"
    script.write_text(_PRELUDE + _RUNNER)
    env = {**os.environ, "WARPGEO_ROBUSTNESS_TMP": str(tmp), "PYTHONPATH": _pythonpath()}
    results: dict[str, dict] = {}
    start = 0
    while start < len(CASES):
        proc = subprocess.run(
            [sys.executable, str(script), str(tmp / "cases.json"), str(start), mode],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        last_started = None
        for line in proc.stdout.splitlines():
            if not line.startswith("{"):
                continue
            item = json.loads(line)
            if "start" in item:
                last_started = item["start"]
            else:
                results[CASES[item["i"]].name] = item
                last_started = None
        if proc.returncode == 0:
            break
        if last_started is None:  # died outside a case (the prelude): every remaining case fails with it
            for case in CASES[start:]:
                results.setdefault(
                    case.name, {"status": "died", "rc": proc.returncode, "err": proc.stderr[-2000:]}
                )
            break
        results[CASES[last_started].name] = {
            "status": "died",
            "rc": proc.returncode,
            "err": proc.stderr[-2000:],
        }
        start = last_started + 1
    return results


@pytest.fixture(scope="module", params=["on", "off"], ids=["checks-on", "checks-off"])
def outcomes(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"robustness-{request.param}")
    _write_files(tmp)
    return request.param, _run_cases(request.param, tmp)


def _params():
    for case in CASES:
        marks = (
            [pytest.mark.xfail(strict=True, reason=f"owned by {case.owner}: {case.why}")]
            if case.owner
            else []
        )
        yield pytest.param(case, id=case.name, marks=marks)


@pytest.mark.parametrize("case", list(_params()))
def test_hostile_input(outcomes, case: Case):
    mode, results = outcomes
    got = results.get(case.name)
    assert got is not None, f"{case.name}: no outcome recorded"
    if got["status"] == "died":
        rc = got["rc"]
        how = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit code {rc}"
        pytest.fail(f"{case.name} killed the process ({how}):\n{got['err']}")
    if case.raises is not None:
        exc, word = case.raises
        if got["status"] == "ok" and case.value and mode == "off":
            return  # a value check, switched off: garbage in, garbage out, no crash
        assert got["status"] == "raised", (
            f"{case.code} should raise {exc.__name__}; returned {got.get('got', '')}"
        )
        assert got["type"] == exc.__name__, (
            f"{case.code}: expected {exc.__name__}, got {got['type']}: {got['msg']}"
        )
        assert word in got["msg"], f"{case.code}: the message does not name {word!r}: {got['msg']}"
        return
    assert got["status"] == "ok", (
        f"{case.code} raised {got.get('type')}: {got.get('msg')} ({got.get('where')})"
    )
    if case.check is not None:
        assert got["check"], (
            f"{case.code}: {case.check} does not hold ({got.get('check_error', '')}); got {got.get('got')}"
        )


def test_enough_cases_on_every_public_name():
    assert len(CASES) >= 60
    names = {name for name in warpgeo.__all__ if name[0] != "_"} - {"value_checks", "set_value_checks", "KNN"}
    names |= {"MeshWorld.from_envs", "set_poses", "set_enabled", "kernel_args", "cli("}
    missing = sorted(n for n in names if not any(n in c.code for c in CASES))
    assert not missing, f"no hostile case calls {missing}"


def test_every_op_is_covered():
    """Every declared op is called directly (``torch.ops.warpgeo.<op>(...)``, past its public function's
    checks) by a hostile case: its own check is what stands between a user's values and the kernel."""
    covered = {
        op for op in every_op() if any(f"torch.ops.warpgeo.{op.split('::')[1]}(" in c.code for c in CASES)
    }
    assert_covers_every_op(covered, "test_robustness (hostile cases)")


def test_python_m_warpgeo_one_line_error(tmp_path):
    """The real command (a process of its own): an unbounded request is one line on stderr and exit code 2."""
    trimesh.creation.box((1.0, 1.0, 1.0)).export(tmp_path / "box.obj")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "warpgeo",
            "sample",
            str(tmp_path / "box.obj"),
            "-k",
            "1000000000",
            "-o",
            str(tmp_path / "out.npy"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": _pythonpath()},
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("warpgeo: error: -k"), proc.stderr


# --------------------------------------------------------------------------------------------------------
# sizes: launches over tensors with rows of >= 2 GiB are split (checked cheaply with the limits lowered)
# --------------------------------------------------------------------------------------------------------


#: The kernel parameters that ops split into blocks (the world's tables and parameters go whole).
_BLOCKED = {
    "spheres",
    "points",
    "cost",
    "dist",
    "grad",
    "grad_here",
    "grad_next",
    "features",
    "out",
    "idx",
    "weight",
    "grad_out",
    "grad_features",
    "grad_weight",
    "order",
    "offsets",
    "starts",
    "ends",
}


@pytest.fixture
def small_launch_limits(monkeypatch):
    """Lower the launch limits (byte strides and dimensions, rows per launch) so that small tensors take
    the split paths: those of the one splitter, ``_launch.launch_blocks`` (which also makes every launch
    refuse a tensor beyond the lowered limit), and of any op that still has limits of its own. Every launch
    is then checked to fit the lowered limit, as real ones must fit 2**31."""
    from warpgeo import sdf

    launches: list[str] = []
    real_run = _launch.run  # where every launch ends
    real_dense_below = _warp.dense_below

    def lower(limit: int, rows: int) -> list[str]:
        monkeypatch.setattr(_launch, "INT32_LIMIT", limit)
        monkeypatch.setattr(_launch, "MAX_LAUNCH_ROWS", rows)
        monkeypatch.setattr(_launch, "dense_below", lambda tensors, _=None: real_dense_below(tensors, limit))
        for module in (sdf,):
            for name, value in (("_STRIDE_LIMIT", limit), ("_MAX_LAUNCH_ROWS", rows)):
                if hasattr(module, name):
                    monkeypatch.setattr(module, name, value)

        def checked_run(kernel, dims, device, block_dim, args):
            for name, t in args.items():
                if name in _BLOCKED and isinstance(t, torch.Tensor):
                    for size, stride in zip(t.shape, t.stride(), strict=True):
                        fits = size == 1 or (size < limit and stride * t.element_size() < limit)
                        assert fits, f"{kernel.key}({name}=...) of shape {tuple(t.shape)} beyond {limit}"
            launches.append(kernel.key)
            return real_run(kernel, dims, device, block_dim, args)

        monkeypatch.setattr(_launch, "run", checked_run)
        return launches

    return lower


def _sdf_all(world, spheres, traj, env):
    s = spheres.clone().requires_grad_()
    t = traj.clone().requires_grad_()
    cost = warpgeo.sphere_mesh_cost(s, world, env_index=env, activation_distance=0.05)
    (gs,) = torch.autograd.grad(cost.sum(), s)
    swept = warpgeo.swept_sphere_mesh_cost(t, world, env_index=env, activation_distance=0.05, sweep_steps=3)
    (gt,) = torch.autograd.grad(swept.sum(), t)
    dist = warpgeo.signed_distance(spheres[..., :3], world, env_index=env)
    return cost, gs, swept, gt, dist


@pytest.mark.parametrize(("limit", "rows"), [(2**31, 5), (2**31, 1), (300, 2**30), (300, 3)])
def test_sdf_split_launches_equal_one_launch(small_launch_limits, limit, rows):
    box = trimesh.creation.box((1.0, 1.0, 1.0))
    world = warpgeo.MeshWorld.from_envs([[box], [trimesh.creation.box((2.0, 2.0, 2.0))]])
    spheres = torch.rand(3, 37, 4) * 3 - 1.5
    spheres[..., 3] = spheres[..., 3].abs() * 0.3
    traj = torch.rand(3, 5, 7, 4) * 3 - 1.5
    traj[..., 3] = traj[..., 3].abs() * 0.3
    env = torch.tensor([0, 1, 0])
    expected = _sdf_all(world, spheres, traj, env)
    launches = small_launch_limits(limit, rows)
    for want, got in zip(expected, _sdf_all(world, spheres, traj, env), strict=True):
        assert torch.equal(want, got)
    assert len(launches) > 5  # split: more than one launch per op


def test_sdf_unsplittable_time_step_is_refused(small_launch_limits):
    world = warpgeo.MeshWorld([trimesh.creation.box((1.0, 1.0, 1.0))])
    small_launch_limits(100, 2)
    with pytest.raises(ValueError, match="spheres"):
        warpgeo.swept_sphere_mesh_cost(torch.zeros(2, 5, 7, 4), world)


@pytest.mark.parametrize(
    ("limit", "rows", "weighted"), [(2**31, 7, True), (100, 2**30, True), (60, 2**30, False), (60, 3, False)]
)
def test_gather_split_launches_equal_one_launch(small_launch_limits, limit, rows, weighted):
    features = torch.randn(3, 4, 9, dtype=torch.float64, requires_grad=True)
    idx = torch.randint(-1, 9, (3, 6, 2))
    weight = torch.rand(3, 6, 2, dtype=torch.float64, requires_grad=True)

    def run():
        out = warpgeo.gather_points(features, idx)
        (g,) = torch.autograd.grad(out.square().sum(), features)
        if not weighted:  # rows of 72 bytes along C: too long for the weights' gradient at limit 60
            return out, g
        wout = warpgeo.gather_points(features, idx, weight=weight)
        gf, gw = torch.autograd.grad(wout.square().sum(), (features, weight))
        return out, g, wout, gf, gw

    expected = run()
    launches = small_launch_limits(limit, rows)
    for want, got in zip(expected, run(), strict=True):
        assert torch.equal(want, got)
    assert len(launches) > 4


@pytest.mark.slow
def test_gather_out_rows_beyond_2GiB_full():
    """The issue's case: an output of 2 x 2**30 half floats per batch entry (2 GiB rows), written for real."""
    features = (torch.arange(2 * 2**14 * 4) % 1000).to(torch.float16).reshape(2, 2**14, 4)
    idx = torch.zeros(2, 2**16, dtype=torch.int32)
    idx[1, -1] = 3
    out = warpgeo.gather_points(features, idx)
    assert out.shape == (2, 2**14, 2**16)
    assert torch.equal(out[0, :, 0], features[0, :, 0]) and torch.equal(out[1, :, -1], features[1, :, 3])
    assert torch.equal(out[1, -1, :-1], features[1, -1, 0].expand(2**16 - 1))


@pytest.mark.slow
def test_gather_feature_rows_of_2GiB_full():
    features = torch.zeros(2, 1, 2**30, dtype=torch.float16)
    features[0, 0, -1], features[1, 0, 7] = 3.0, -1.0
    out = warpgeo.gather_points(features, torch.tensor([[2**30 - 1, 0], [7, -1]]))
    assert out.tolist() == [[[3.0, 0.0]], [[-1.0, 0.0]]]


@pytest.mark.slow
def test_sphere_batches_beyond_2GiB_full():
    """(2, 2**27, 4) float32 spheres: 2 GiB per batch entry. Mostly disabled; real ones at both ends."""
    world = warpgeo.MeshWorld([trimesh.creation.box((1.0, 1.0, 1.0))])
    spheres = torch.empty(2, 2**27, 4)
    spheres[..., 3] = -1.0
    spheres[..., :3] = 0.0
    probe = torch.tensor([0.6, 0.0, 0.0, 0.2])  # penetrates by 0.1
    spheres[0, 0], spheres[1, -1], spheres[1, 2**26] = probe, probe, probe
    cost = warpgeo.sphere_mesh_cost(spheres, world)
    assert cost.shape == (2, 2**27)
    for b, s in ((0, 0), (1, -1), (1, 2**26)):
        assert abs(cost[b, s].item() - 0.1) < 1e-5
    assert cost.sum().item() == pytest.approx(0.3, abs=1e-4)


# --------------------------------------------------------------------------------------------------------
# soak, threads, determinism
# --------------------------------------------------------------------------------------------------------


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs /proc (Linux)")
def test_soak_memory_is_flat():
    world = warpgeo.MeshWorld([trimesh.creation.box((1.0, 1.0, 1.0))])
    spheres = (torch.rand(2, 64, 4) - 0.5).requires_grad_()
    features = torch.rand(2, 8, 100, requires_grad=True)
    idx = torch.randint(-1, 100, (2, 32))
    poses = torch.tensor([[0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]])

    def cycle(n):
        for _ in range(n):
            cost = warpgeo.sphere_mesh_cost(spheres, world, activation_distance=0.02)
            cost.sum().backward()
            warpgeo.gather_points(features, idx).sum().backward()
            warpgeo.signed_distance(spheres.detach()[..., :3], world)
            world.set_poses(poses)
            world.set_enabled([True])
            with contextlib.suppress(IndexError):
                warpgeo.gather_points(features, idx + 200)

    cycle(200)
    before = _rss_mib()
    cycle(800)
    assert _rss_mib() - before < 16.0


def test_two_threads_give_the_same_answers():
    world = warpgeo.MeshWorld([trimesh.creation.box((1.0, 1.0, 1.0)), trimesh.creation.icosphere()])
    spheres = torch.rand(4, 50, 4) * 2 - 1
    spheres[..., 3] = 0.1
    features = torch.rand(2, 16, 500)
    idx = torch.randint(-1, 500, (2, 300))
    points = torch.rand(2, 400, 3)
    expected = (
        warpgeo.sphere_mesh_cost(spheres, world),
        warpgeo.gather_points(features, idx),
        warpgeo.farthest_point_sampling(points, 32),
        warpgeo.signed_distance(spheres[..., :3], world),
    )
    mismatches: list[str] = []
    errors: list[BaseException] = []

    def work(which: int) -> None:
        try:
            for _ in range(25):
                got = (
                    warpgeo.sphere_mesh_cost(spheres, world),
                    warpgeo.gather_points(features, idx),
                    warpgeo.farthest_point_sampling(points, 32),
                    warpgeo.signed_distance(spheres[..., :3], world),
                )
                mismatches.extend(
                    f"thread {which}, output {i}"
                    for i, (a, b) in enumerate(zip(expected, got, strict=True))
                    if not torch.equal(a, b)
                )
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert not mismatches, mismatches[:5]


def test_runs_are_bit_identical():
    world = warpgeo.MeshWorld([trimesh.creation.torus(1.0, 0.3)])

    def run():
        torch.manual_seed(1)
        spheres = (torch.rand(2, 3, 40, 4) * 3 - 1.5).requires_grad_()
        cost = warpgeo.swept_sphere_mesh_cost(spheres, world, activation_distance=0.05)
        (grad,) = torch.autograd.grad(cost.sum(), spheres)
        points = torch.rand(3, 300, 3, dtype=torch.float64)
        fps = warpgeo.farthest_point_sampling(points, 40)
        features = torch.rand(3, 8, 300, requires_grad=True)
        nn = warpgeo.knn(points.float(), points.float(), 4)
        out = warpgeo.gather_points(features, nn.idx, weight=1.0 / (nn.dists + 1e-3))
        (gf,) = torch.autograd.grad(out.sum(), features)
        return cost, grad, fps, nn.dists, nn.idx, out, gf

    for a, b in zip(run(), run(), strict=True):
        assert torch.equal(a, b)
