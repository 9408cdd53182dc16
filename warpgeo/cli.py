"""The ``warpgeo`` command (also ``python -m warpgeo``).

::

    warpgeo demo [-o DIR] [--quick]                    collision avoidance + sampling demos, PNGs in DIR
    warpgeo sample MESH_OR_CLOUD -k 4096 -o out.ply     farthest point sampling of a mesh surface or a cloud
    warpgeo sdf MESH POINTS.npy -o sd.npy               signed distance of points to a mesh (negative inside)

Every subcommand takes ``--device`` (``cpu``, ``cuda``, ``cuda:1``; CUDA when present by default) and
``--debug`` (full tracebacks). Problems with the user's files or arguments end with a one-line
``warpgeo: error: ...`` on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

__all__ = ["main"]

#: Exit code for bad input (files, arguments), as argparse uses for usage errors.
EXIT_USAGE = 2
#: Exit code when the demo ran but did not reach its goal.
EXIT_FAILED = 1

_CLOUD_SUFFIXES = (".npy", ".xyz", ".txt")
_MESH_SUFFIXES = (".ply", ".obj", ".stl", ".off", ".glb", ".gltf")
_POINT_OUT_SUFFIXES = (".ply", ".npy", ".xyz", ".txt")


class CliError(Exception):
    """A problem with the user's input: reported as one line, exit code 2."""


# --------------------------------------------------------------------------------------------------------
# file IO
# --------------------------------------------------------------------------------------------------------


def _existing_file(path: str, what: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise CliError(f"{what} not found: {path}")
    if not p.is_file():
        raise CliError(f"{what} is not a file: {path}")
    return p


def _load_npy(p: Path) -> np.ndarray:
    with open(p, "rb") as f:
        if f.read(6) != b"\x93NUMPY":
            raise CliError(f"cannot read {p}: not a .npy file (no NumPy header)")
    try:
        return np.load(p, allow_pickle=False)
    except Exception as exc:
        raise CliError(f"cannot read {p}: {_reason(exc)}") from exc


def _xyz_columns(array: np.ndarray, path: Path) -> np.ndarray:
    if array.ndim == 1 and array.size >= 3:  # a one-point text file
        array = array[None, :]
    if array.ndim != 2 or array.shape[1] < 3 or array.shape[0] == 0:
        raise CliError(f"cannot read {path}: expected an (N, 3) array of points, got shape {array.shape}")
    points = np.asarray(array[:, :3], dtype=np.float64)
    if not np.isfinite(points).all():
        raise CliError(f"cannot read {path}: the points contain NaN or inf")
    return points


def read_points_or_mesh(path: str):
    """A point cloud ``(N, 3)`` float64 array, or a ``trimesh.Trimesh``, from a file.

    ``.npy`` (an ``(N, >=3)`` array), ``.xyz`` / ``.txt`` (whitespace-separated columns, x y z first) and
    ``.ply`` without faces give clouds; ``.ply`` with faces, ``.obj``, ``.stl``, ``.off``, ``.glb`` give
    meshes.

    Raises:
        CliError: the file is missing, unreadable, or holds no points.
    """
    p = _existing_file(path, "input file")
    suffix = p.suffix.lower()
    if suffix == ".npy":
        array = _load_npy(p)
        if not np.issubdtype(array.dtype, np.number):
            raise CliError(f"cannot read {p}: expected a numeric array, got dtype {array.dtype}")
        return _xyz_columns(array, p)
    if suffix in (".xyz", ".txt"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # an empty file: reported below as (0, 1)
                array = np.loadtxt(p, ndmin=2)
        except Exception as exc:
            raise CliError(
                f"cannot read {p}: not a whitespace-separated table of numbers ({_reason(exc)})"
            ) from exc
        return _xyz_columns(array, p)
    if suffix in _MESH_SUFFIXES:
        import trimesh

        try:
            loaded = trimesh.load(p, force="mesh") if suffix != ".ply" else trimesh.load(p)
        except Exception as exc:
            raise CliError(f"cannot read {p}: {_reason(exc)}") from exc
        if isinstance(loaded, trimesh.PointCloud):
            return _xyz_columns(np.asarray(loaded.vertices), p)
        if isinstance(loaded, trimesh.Trimesh) and len(loaded.faces) > 0:
            return loaded
        if isinstance(loaded, trimesh.Trimesh) and len(loaded.vertices) > 0:
            return _xyz_columns(np.asarray(loaded.vertices), p)
        raise CliError(f"cannot read {p}: it holds no points or triangles")
    raise CliError(
        f"cannot read {p}: unknown file type {suffix or '(none)'!r}; "
        f"expected one of {', '.join(_CLOUD_SUFFIXES + _MESH_SUFFIXES)}"
    )


def read_mesh(path: str):
    """A ``trimesh.Trimesh`` from a file; raises :class:`CliError` for anything else."""
    loaded = read_points_or_mesh(path)
    if isinstance(loaded, np.ndarray):
        raise CliError(f"{path} holds a point cloud, not a triangle mesh")
    return loaded


def read_points(path: str) -> np.ndarray:
    """Query points for ``sdf``: any array ``(..., 3)`` from ``.npy``, or ``(N, 3)`` from the other formats."""
    p = _existing_file(path, "points file")
    if p.suffix.lower() == ".npy":
        array = _load_npy(p)
        if (
            not np.issubdtype(array.dtype, np.number)
            or array.ndim < 1
            or array.shape[-1] != 3
            or array.size == 0
        ):
            raise CliError(
                f"cannot read {p}: expected a numeric (..., 3) array, got {array.dtype} {array.shape}"
            )
        if not np.isfinite(array).all():
            raise CliError(f"cannot read {p}: the points contain NaN or inf")
        return array.astype(np.float64, copy=False)
    loaded = read_points_or_mesh(path)
    return np.asarray(loaded.vertices) if not isinstance(loaded, np.ndarray) else loaded


def _check_output(path: str, suffixes: tuple[str, ...]) -> Path:
    p = Path(path)
    if p.suffix.lower() not in suffixes:
        raise CliError(
            f"cannot write {p}: unknown file type {p.suffix or '(none)'!r}; expected {', '.join(suffixes)}"
        )
    if not p.parent.exists():
        raise CliError(f"cannot write {p}: folder {p.parent} does not exist")
    return p


def write_points(points: np.ndarray, path: Path) -> None:
    """Write an ``(N, 3)`` cloud as ``.ply`` (binary), ``.npy`` (float32) or ``.xyz`` / ``.txt`` (text)."""
    suffix = path.suffix.lower()
    points = np.asarray(points, dtype=np.float32)
    if suffix == ".npy":
        np.save(path, points)
    elif suffix in (".xyz", ".txt"):
        np.savetxt(path, points, fmt="%.7g")
    else:
        import trimesh

        trimesh.PointCloud(points).export(path)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# --------------------------------------------------------------------------------------------------------
# subcommands
# --------------------------------------------------------------------------------------------------------


def _device(name: str | None):
    import torch

    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise CliError(f"--device {name!r} is not a device (try cpu, cuda, cuda:0)") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CliError(f"--device {name}: CUDA is not available on this machine")
    if device.type not in ("cpu", "cuda"):
        raise CliError(f"--device {name}: warpgeo runs on cpu and cuda only")
    return device


def _bar(total: int, desc: str, quiet: bool):
    from tqdm.auto import tqdm

    # disable=None: no bar when stderr is not a terminal (logs, CI), unless asked to be quiet anyway.
    return tqdm(total=total, desc=desc, unit="step", disable=True if quiet else None, leave=False)


def cmd_demo(args: argparse.Namespace) -> int:
    from . import demos

    device = _device(args.device)
    out = Path(args.output)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"cannot create output folder {out}: {_reason(exc)}") from exc
    sizes = (
        {"horizon": 24, "iterations": 60, "num_surface": 4000, "max_k": 256, "show_k": 128}
        if args.quick
        else {"horizon": 40, "iterations": 150, "num_surface": 20000, "max_k": 1024, "show_k": 256}
    )
    progress = not args.quiet
    t0 = time.perf_counter()
    print(f"warpgeo demo on {device} -> {out}/")

    print(
        "1/2 collision avoidance: a sphere's trajectory pushed out of three obstacles (swept sphere-mesh cost)"
    )
    ca = demos.run_collision_avoidance(
        horizon=sizes["horizon"], iterations=sizes["iterations"], device=device, progress=progress
    )
    ca_png = demos.plot_collision_avoidance(ca, out / "collision_avoidance.png")
    print(
        f"    cost {ca.costs[0]:.4f} -> {ca.costs[-1]:.4f} in {len(ca.costs) - 1} iterations; "
        f"collision-free: {'yes' if ca.collision_free else 'NO'} (clearance {ca.final_clearance:+.4f})"
    )
    print(f"    wrote {ca_png}")

    print("2/2 farthest point sampling on a torus vs random sampling (coverage radius)")
    ps = demos.run_point_sampling(
        num_surface=sizes["num_surface"], max_k=sizes["max_k"], show_k=sizes["show_k"], device=device
    )
    ps_png = demos.plot_point_sampling(ps, out / "point_sampling.png")
    print(
        f"    K = {ps.ks[-1]}: FPS covers the surface within {ps.fps_radius[-1]:.4f}, "
        f"random within {ps.random_radius[-1]:.4f} ({ps.random_radius[-1] / ps.fps_radius[-1]:.1f}x)"
    )
    print(f"    wrote {ps_png}")
    print(f"done in {time.perf_counter() - t0:.1f} s")
    if not ca.collision_free:
        print(
            "warpgeo: the collision-avoidance demo did not reach a collision-free trajectory", file=sys.stderr
        )
        return EXIT_FAILED
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    import torch

    import warpgeo

    if args.k <= 0:
        raise CliError(f"-k must be positive; got {args.k}")
    output = _check_output(args.output, _POINT_OUT_SUFFIXES)
    device = _device(args.device)
    with _bar(4, "sample", args.quiet) as bar:
        bar.set_description("reading")
        loaded = read_points_or_mesh(args.input)
        bar.update(1)
        if isinstance(loaded, np.ndarray):
            points, source = loaded, f"{len(loaded)} points"
        else:
            import trimesh

            count = args.surface_samples or max(20 * args.k, 50_000)
            bar.set_description("surface sampling")
            points, _ = trimesh.sample.sample_surface(loaded, count, seed=args.seed)
            source = f"{len(loaded.faces)} triangles, {count} surface samples"
        bar.update(1)
        bar.set_description("farthest point sampling")
        cloud = torch.as_tensor(points, dtype=torch.float32, device=device)
        idx = warpgeo.farthest_point_sampling(cloud, min(args.k, len(points)), start_index=0)
        chosen = points[idx.cpu().numpy()]
        bar.update(1)
        bar.set_description("writing")
        write_points(chosen, output)
        bar.update(1)
    note = "" if args.k <= len(points) else f" (only {len(points)} points in the input)"
    print(f"{args.input} ({source}) -> {len(chosen)} farthest points{note} -> {output}")
    return 0


def cmd_sdf(args: argparse.Namespace) -> int:
    import torch

    import warpgeo

    if args.chunk <= 0:
        raise CliError(f"--chunk must be positive; got {args.chunk}")
    output = _check_output(args.output, (".npy", ".txt"))
    device = _device(args.device)
    mesh = read_mesh(args.mesh)
    points = read_points(args.points)
    sign_method = args.sign_method
    if sign_method == "auto":
        sign_method = "ray" if mesh.is_watertight else "winding"
    try:
        world = warpgeo.MeshWorld([mesh], device=str(device), sign_method=sign_method)
    except RuntimeError as exc:  # e.g. a Warp build without winding-number support
        raise CliError(f"cannot use {args.mesh} with --sign-method {sign_method}: {_reason(exc)}") from exc
    flat = torch.as_tensor(points.reshape(-1, 3), dtype=torch.float32, device=device)
    parts = []
    chunks = flat.split(args.chunk)
    with _bar(len(chunks), "signed distance", args.quiet) as bar, torch.no_grad():
        for chunk in chunks:
            parts.append(warpgeo.signed_distance(chunk, world).cpu())
            bar.update(1)
    sd = torch.cat(parts).numpy().reshape(points.shape[:-1])
    if output.suffix.lower() == ".npy":
        np.save(output, sd)
    else:
        np.savetxt(output, sd.reshape(-1), fmt="%.7g")
    inside = int((sd < 0).sum())
    print(
        f"{flat.shape[0]} points vs {args.mesh} ({len(mesh.faces)} triangles, sign by {sign_method}): "
        f"{inside} inside, distance in [{sd.min():.4g}, {sd.max():.4g}] -> {output}"
    )
    return 0


# --------------------------------------------------------------------------------------------------------
# parser and entry point
# --------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    # Options every subcommand takes; SUPPRESS keeps a value given before the subcommand from being reset.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--device",
        default=argparse.SUPPRESS,
        help="cpu, cuda or cuda:N (default: cuda if available, else cpu)",
    )
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show full tracebacks"
    )
    common.add_argument(
        "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress bars"
    )

    parser = argparse.ArgumentParser(
        prog="warpgeo",
        description="Differentiable geometry ops for PyTorch, written as NVIDIA Warp kernels.",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"warpgeo {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="run the collision-avoidance and sampling demos, write PNGs",
        description="Run the collision-avoidance and farthest-point-sampling demos on generated data and "
        "write their pictures to a folder.",
    )
    demo.add_argument("-o", "--output", default="warpgeo-demo", help="output folder (default: warpgeo-demo)")
    demo.add_argument("--quick", action="store_true", help="smaller sizes (a few seconds)")
    demo.set_defaults(func=cmd_demo)

    sample = sub.add_parser(
        "sample",
        parents=[common],
        help="farthest point sampling of a mesh surface or a point cloud",
        description="Pick K points of a cloud (or of a mesh's surface samples) by farthest point sampling. "
        "Input: .ply, .npy, .xyz, .txt clouds; .ply, .obj, .stl, .off, .glb meshes. "
        "Output: .ply, .npy, .xyz, .txt.",
    )
    sample.add_argument("input", metavar="MESH_OR_CLOUD", help="mesh or point-cloud file")
    sample.add_argument("-k", type=int, default=4096, help="number of points to keep (default: 4096)")
    sample.add_argument("-o", "--output", required=True, help="output cloud (.ply, .npy, .xyz, .txt)")
    sample.add_argument(
        "--surface-samples",
        type=int,
        default=None,
        help="dense samples of a mesh surface (default: max(20 K, 50000))",
    )
    sample.add_argument("--seed", type=int, default=0, help="seed of the surface sampling (default: 0)")
    sample.set_defaults(func=cmd_sample)

    sdf = sub.add_parser(
        "sdf",
        parents=[common],
        help="signed distance from points to a mesh (negative inside)",
        description="Signed distance of each query point to a mesh, negative inside. Points: a .npy array "
        "(..., 3) (the output keeps its leading shape) or a .xyz/.txt/.ply cloud.",
    )
    sdf.add_argument("mesh", metavar="MESH", help="mesh file (.obj, .stl, .ply, .off, .glb)")
    sdf.add_argument("points", metavar="POINTS", help="query points (.npy, .xyz, .txt, .ply)")
    sdf.add_argument("-o", "--output", required=True, help="output distances (.npy or .txt)")
    sdf.add_argument(
        "--sign-method",
        choices=("auto", "ray", "winding"),
        default="auto",
        help="inside test: ray (closed meshes), winding (open meshes); auto picks by watertightness",
    )
    sdf.add_argument("--chunk", type=int, default=1 << 16, help="points per launch (default: 65536)")
    sdf.set_defaults(func=cmd_sdf)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``warpgeo`` command; returns the exit code (argparse exits with 2 on usage errors)."""
    args = build_parser().parse_args(argv)
    for name, default in (("device", None), ("debug", False), ("quiet", False)):
        if not hasattr(args, name):
            setattr(args, name, default)
    try:
        return args.func(args)
    except CliError as exc:
        if args.debug:
            raise
        print(f"warpgeo: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (ValueError, TypeError, IndexError, OSError) as exc:
        # What the ops raise on bad data (and the OS on unwritable paths) is still the user's input.
        if args.debug:
            raise
        print(
            f"warpgeo: error: {type(exc).__name__}: {_reason(exc)} (--debug shows the traceback)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("warpgeo: interrupted", file=sys.stderr)
        return 130
