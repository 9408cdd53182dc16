"""The ``warpgeo`` command (also ``python -m warpgeo``).

::

    warpgeo demo [-o DIR] [--quick]                    collision avoidance, sampling, arm demos: PNGs in DIR
    warpgeo sample MESH_OR_CLOUD -k 4096 -o out.ply     farthest point sampling of a mesh surface or a cloud
    warpgeo sdf MESH POINTS.npy -o sd.npy               signed distance of points to a mesh (negative inside)

Every subcommand takes ``--device`` (``cpu``, ``cuda``, ``cuda:1``; CUDA when present by default) and
``--debug`` (full tracebacks). Problems with the user's files or arguments, argparse's usage errors
included, end with a one-line ``warpgeo: error: ...`` on stderr and exit code 2. Arguments are checked
before torch is imported, so a typo costs no start-up time.

Point tables (``.npy`` arrays ``(N, C)``, ``.xyz`` / ``.txt`` columns, ``.ply`` clouds) hold x, y, z first;
further columns (``.ply``: further vertex properties such as normals or colours) are per-point
attributes: ``sample`` carries them into its output (``--xyz-only`` drops them), ``sdf`` ignores them.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import warnings
from dataclasses import dataclass, field
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
_INDEX_OUT_SUFFIXES = (".npy", ".txt")
# torch's device types other than the two Warp runs on: named as such, not as "not a device"
#: The most surface samples ``sample`` draws from a mesh (trimesh holds them in float64: 1.5 GiB at this size).
MAX_SURFACE_SAMPLES = 2**26
_OTHER_DEVICE_TYPES = ("mps", "meta", "xpu", "xla", "hip", "ipu", "hpu", "mtia", "lazy", "vulkan", "ve")
#: A table of at most this many rows with more attribute columns than rows reads as points stored as
#: columns (x, y, z and a few attributes as rows): refused as transposed.
_TRANSPOSED_MAX_ROWS = 8
#: The most attribute names a summary line prints.
_NAMES_SHOWN = 6


class CliError(Exception):
    """A problem with the user's input: reported as one line, exit code 2."""


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# --------------------------------------------------------------------------------------------------------
# file IO
# --------------------------------------------------------------------------------------------------------


@dataclass
class Cloud:
    """A point table: ``points (N, 3)`` (the file's float dtype, float64 for text) and per-point attributes
    (each ``(N,)``, by name, in file order: ``c3, c4, ...`` for array columns, property names for .ply)."""

    points: np.ndarray
    attributes: dict[str, np.ndarray] = field(default_factory=dict)

    def take(self, idx: np.ndarray) -> Cloud:
        return Cloud(self.points[idx], {k: v[idx] for k, v in self.attributes.items()})


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
        array = np.load(p, allow_pickle=False)
    except Exception as exc:
        raise CliError(f"cannot read {p}: {_reason(exc)}") from exc
    if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise CliError(f"cannot read {p}: expected a numeric array, got dtype {array.dtype}")
    return array


def _float(array: np.ndarray) -> np.ndarray:
    """float32 and float64 stay as they are; anything else becomes float64."""
    return array if array.dtype in (np.float32, np.float64) else array.astype(np.float64)


def _names(names) -> str:
    """Attribute names for a summary line: the first few, then how many more."""
    names = list(names)
    shown = ", ".join(names[:_NAMES_SHOWN])
    return shown if len(names) <= _NAMES_SHOWN else f"{shown}, ... {len(names) - _NAMES_SHOWN} more"


def _check_not_transposed(shape: tuple[int, ...], path: Path) -> None:
    """Refuse a table ``(..., R, C)`` that reads as a few points with more attributes than points: points
    stored as columns, ``(3, N)`` (x, y, z as rows) or ``(3 + a, N)``. A few points with a few attributes
    each (``(3, 6)``: r, g, b) are read as written."""
    if len(shape) < 2:
        return
    rows, columns = shape[-2], shape[-1]
    if 3 <= rows <= _TRANSPOSED_MAX_ROWS and columns - 3 > rows:
        fix = "array.T" if len(shape) == 2 else "array.swapaxes(-1, -2)"
        raise CliError(
            f"cannot read {path}: an array of shape {shape} looks transposed: it would be {rows} points "
            f"with {columns - 3} attributes each. Points are rows, x, y, z first: save {fix} (shape "
            f"{(*shape[:-2], columns, rows)})"
        )


def _table(array: np.ndarray, path: Path) -> Cloud:
    """An ``(N, C >= 3)`` array as a cloud: x, y, z first, the other columns as attributes."""
    if array.ndim == 1 and array.size >= 3:  # a one-point text file
        array = array[None, :]
    if array.size == 0:
        raise CliError(f"cannot read {path}: it holds no points (an empty array of shape {array.shape})")
    if array.ndim != 2 or array.shape[1] < 3 or array.shape[0] == 0:
        raise CliError(f"cannot read {path}: expected an (N, 3) array of points, got shape {array.shape}")
    _check_not_transposed(array.shape, path)
    cloud = Cloud(_float(array[:, :3]), {f"c{i}": array[:, i] for i in range(3, array.shape[1])})
    _check_finite(cloud.points, path)
    return cloud


def _check_finite(points: np.ndarray, path: Path) -> None:
    if not np.isfinite(points).all():
        raise CliError(f"cannot read {path}: the points contain NaN or inf")


def _ply_cloud(loaded, path: Path) -> Cloud:
    """The vertices of a .ply point cloud with their other vertex properties, in the file's dtypes."""
    raw = loaded.metadata.get("_ply_raw", {}).get("vertex", {})
    properties, data = raw.get("properties", {}), raw.get("data")
    n = len(loaded.vertices)
    columns = {}
    for name in properties:
        try:
            column = np.asarray(data[name])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if column.dtype != object and column.size == n:  # list properties have no per-point column
            columns[name] = column.reshape(n)
    if not {"x", "y", "z"} <= columns.keys():
        return Cloud(np.asarray(loaded.vertices, dtype=np.float64))
    points = _float(np.stack([columns.pop(k) for k in "xyz"], axis=1))
    _check_finite(points, path)
    return Cloud(points, columns)


def read_points_or_mesh(path: str):
    """A :class:`Cloud` or a ``trimesh.Trimesh`` from a file.

    ``.npy`` (an ``(N, >=3)`` array), ``.xyz`` / ``.txt`` (whitespace-separated columns, x y z first) and
    ``.ply`` without faces give clouds; ``.ply`` with faces, ``.obj``, ``.stl``, ``.off``, ``.glb`` give
    meshes.

    Raises:
        CliError: the file is missing, unreadable, or holds no points.
    """
    p = _existing_file(path, "input file")
    suffix = p.suffix.lower()
    if suffix == ".npy":
        return _table(_load_npy(p), p)
    if suffix in (".xyz", ".txt"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # an empty file: reported below as (0, 1)
                array = np.loadtxt(p, ndmin=2)
        except Exception as exc:
            raise CliError(
                f"cannot read {p}: not a whitespace-separated table of numbers ({_reason(exc)})"
            ) from exc
        return _table(array, p)
    if suffix in _MESH_SUFFIXES:
        import trimesh

        try:
            loaded = trimesh.load(p, force="mesh") if suffix != ".ply" else trimesh.load(p)
        except ImportError as exc:
            # trimesh reaches for an optional text-encoding guesser (charset_normalizer) only when a file is
            # neither valid binary nor UTF-8 text: the file is corrupt, the missing module is not the problem
            raise CliError(
                f"cannot read {p}: not a valid {suffix} file (neither valid binary nor UTF-8 text)"
            ) from exc
        except Exception as exc:
            raise CliError(f"cannot read {p}: {_reason(exc)}") from exc
        if isinstance(loaded, trimesh.PointCloud):
            return _ply_cloud(loaded, p) if suffix == ".ply" else _table(np.asarray(loaded.vertices), p)
        if isinstance(loaded, trimesh.Trimesh) and len(loaded.faces) > 0:
            return loaded
        if isinstance(loaded, trimesh.Trimesh) and len(loaded.vertices) > 0:
            return _table(np.asarray(loaded.vertices), p)
        raise CliError(f"cannot read {p}: it holds no points or triangles")
    raise CliError(
        f"cannot read {p}: unknown file type {suffix or '(none)'!r}; "
        f"expected one of {', '.join(_CLOUD_SUFFIXES + _MESH_SUFFIXES)}"
    )


def read_mesh(path: str):
    """A ``trimesh.Trimesh`` from a file; raises :class:`CliError` for anything else."""
    loaded = read_points_or_mesh(path)
    if isinstance(loaded, Cloud):
        raise CliError(f"{path} holds a point cloud, not a triangle mesh")
    return loaded


def read_points(path: str) -> tuple[np.ndarray, int]:
    """Query points for ``sdf`` and how many attribute columns were ignored.

    A ``.npy`` array ``(..., C >= 3)`` gives ``(..., 3)`` (its leading shape is kept); the other formats
    give ``(N, 3)``. float32 and float64 stay as they are (text is float64).
    """
    p = _existing_file(path, "points file")
    if p.suffix.lower() == ".npy":
        array = _load_npy(p)
        if array.size == 0:
            raise CliError(f"cannot read {p}: it holds no points (an empty array of shape {array.shape})")
        if array.ndim < 1 or array.shape[-1] < 3:
            raise CliError(
                f"cannot read {p}: expected a numeric (..., 3) array, got {array.dtype} {array.shape}"
            )
        _check_not_transposed(array.shape, p)
        points = _float(array[..., :3])
        _check_finite(points, p)
        return points, array.shape[-1] - 3
    loaded = read_points_or_mesh(path)
    if isinstance(loaded, Cloud):
        return loaded.points, len(loaded.attributes)
    return np.asarray(loaded.vertices), 0


def _check_output(path: str, suffixes: tuple[str, ...], what: str = "") -> Path:
    """Fail before any work if ``path`` has a wrong suffix or cannot be written."""
    p = Path(path)
    flag = f"{what} " if what else ""
    if p.is_dir():
        raise CliError(
            f"cannot write {flag}{p}: it is a folder; give a file name, e.g. {p / ('out' + suffixes[0])}"
        )
    if p.suffix.lower() not in suffixes:
        raise CliError(
            f"cannot write {flag}{p}: unknown file type {p.suffix or '(none)'!r}; expected {', '.join(suffixes)}"
        )
    if not p.parent.exists():
        raise CliError(f"cannot write {flag}{p}: folder {p.parent} does not exist")
    existed = p.exists()
    try:  # a probe: append mode never truncates what is there
        with open(p, "ab"):
            pass
    except OSError as exc:
        raise CliError(f"cannot write {flag}{p}: {_reason(exc)}") from exc
    if not existed:
        p.unlink()
    return p


def _text_rows(columns: list[np.ndarray]) -> str:
    """Rows of whitespace-separated values, each printed at its dtype's shortest round-trip repr."""
    return "".join(" ".join(str(v) for v in row) + "\n" for row in zip(*columns, strict=True))


def _write(path: Path, write) -> None:
    try:
        write()
    except OSError as exc:
        raise CliError(f"cannot write {path}: {_reason(exc)}") from exc


def write_cloud(cloud: Cloud, path: Path) -> None:
    """Write a cloud: ``.npy`` (one ``(N, 3 + A)`` array in the widest column dtype), ``.xyz`` / ``.txt``
    (text, one row per point) or ``.ply`` (binary; x, y, z as float32, attributes as named properties)."""
    suffix = path.suffix.lower()
    columns = [cloud.points[:, i] for i in range(3)] + list(cloud.attributes.values())
    if suffix == ".npy":
        _write(path, lambda: np.save(path, np.stack(columns, axis=1).astype(np.result_type(*columns))))
    elif suffix in (".xyz", ".txt"):
        _write(path, lambda: path.write_text(_text_rows(columns)))
    else:
        import trimesh

        mesh = trimesh.Trimesh(
            vertices=cloud.points,
            faces=np.zeros((0, 3), dtype=np.int64),
            vertex_attributes=dict(cloud.attributes),
            process=False,
        )
        _write(path, lambda: mesh.export(path, file_type="ply"))


def write_values(values: np.ndarray, path: Path) -> None:
    """Write an array: ``.npy`` as it is, ``.txt`` flattened, one value per line."""
    if path.suffix.lower() == ".npy":
        _write(path, lambda: np.save(path, values))
    else:
        _write(path, lambda: path.write_text(_text_rows([values.reshape(-1)])))


# --------------------------------------------------------------------------------------------------------
# arguments
# --------------------------------------------------------------------------------------------------------


def _check_device_name(name: str | None) -> None:
    """Refuse a --device that is not cpu / cuda / cuda:N, without importing torch."""
    if name is None or re.fullmatch(r"cpu|cuda(:\d+)?", name):
        return
    if name.split(":")[0] in _OTHER_DEVICE_TYPES:
        raise CliError(f"--device {name}: warpgeo runs on cpu and cuda only")
    raise CliError(f"--device {name!r} is not a device (try cpu, cuda, cuda:0)")


def _device(name: str | None):
    import torch

    _check_device_name(name)
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CliError(f"--device {name}: CUDA is not available on this machine")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise CliError(
            f"--device {name}: this machine has {_plural(torch.cuda.device_count(), 'CUDA device')}"
        )
    return device


def _positive(value: int | None, flag: str) -> None:
    if value is not None and value <= 0:
        raise CliError(f"{flag} must be positive; got {value}")


def _bar(total: int, desc: str, quiet: bool):
    from tqdm.auto import tqdm

    # disable=None: no bar when stderr is not a terminal (logs, CI), unless asked to be quiet anyway.
    return tqdm(total=total, desc=desc, unit="step", disable=True if quiet else None, leave=False)


# --------------------------------------------------------------------------------------------------------
# subcommands
# --------------------------------------------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    from .demos import matplotlib_missing

    hint = matplotlib_missing("warpgeo demo")
    if hint is not None:
        raise CliError(hint)
    _check_device_name(args.device)
    out = Path(args.output)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"cannot create output folder {out}: {_reason(exc)}") from exc

    from . import demos

    device = _device(args.device)
    sizes = (
        {"horizon": 24, "iterations": 60, "num_surface": 4000, "max_k": 256, "show_k": 128}
        if args.quick
        else {"horizon": 40, "iterations": 150, "num_surface": 20000, "max_k": 1024, "show_k": 256}
    )
    arm_sizes = (
        {"trajectories": 4, "waypoints": 12, "steps": 30}
        if args.quick
        else {"trajectories": 8, "waypoints": 16, "steps": 60}
    )
    t0 = time.perf_counter()
    print(f"warpgeo demo on {device} -> {out}/")

    print(
        "1/3 collision avoidance: a sphere's trajectory pushed out of three obstacles (swept sphere-mesh cost)"
    )
    ca = demos.run_collision_avoidance(
        horizon=sizes["horizon"], iterations=sizes["iterations"], device=device, progress=not args.quiet
    )
    ca_png = demos.plot_collision_avoidance(ca, out / "collision_avoidance.png")
    print(
        f"    cost {ca.costs[0]:.4f} -> {ca.costs[-1]:.4f} in {len(ca.costs) - 1} iterations "
        f"(> 0 within η = {ca.activation_distance:g} of a surface); "
        f"collision-free: {'yes' if ca.collision_free else 'NO'} (clearance {ca.final_clearance:+.4f})"
    )
    print(f"    wrote {ca_png}")

    print("2/3 farthest point sampling on a torus vs random sampling (coverage radius)")
    ps = demos.run_point_sampling(
        num_surface=sizes["num_surface"], max_k=sizes["max_k"], show_k=sizes["show_k"], device=device
    )
    ps_png = demos.plot_point_sampling(ps, out / "point_sampling.png")
    print(
        f"    K = {ps.ks[-1]}: FPS covers the surface within {ps.fps_radius[-1]:.4f}, "
        f"random within {ps.random_radius[-1]:.4f} ({ps.random_radius[-1] / ps.fps_radius[-1]:.1f}x)"
    )
    print(f"    wrote {ps_png}")

    print(
        "3/3 a 7-DoF arm's trajectories optimised around a torus (its spheres: robot, swept and self costs)"
    )
    arm_hint = demos.urdf_reader_missing("the arm demo")
    arm = None
    if arm_hint is not None:
        print(f"    skipped: {arm_hint}")
    else:
        arm = demos.run_arm_trajectory(**arm_sizes, device=device, progress=not args.quiet)
        arm_png = demos.plot_arm_trajectory(arm, out / "arm_trajectory.png")
        print(
            f"    world cost {arm.costs[0]['world']:.4f} -> {arm.costs[-1]['world']:.4f} in "
            f"{len(arm.costs) - 1} Adam steps; collision-free trajectories: {int(arm.free_after.sum())}/"
            f"{len(arm.free_after)} (at the start: {int(arm.free_before.sum())})"
        )
        print(f"    wrote {arm_png}")
    print(f"done in {time.perf_counter() - t0:.1f} s")
    if not ca.collision_free:
        print(
            "warpgeo: the collision-avoidance demo did not reach a collision-free trajectory", file=sys.stderr
        )
        return EXIT_FAILED
    if arm is not None and not arm.free_after.any():
        print("warpgeo: the arm demo did not reach a collision-free trajectory", file=sys.stderr)
        return EXIT_FAILED
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    _positive(args.k, "-k")
    _positive(args.surface_samples, "--surface-samples")
    if args.surface_samples is not None and args.surface_samples > MAX_SURFACE_SAMPLES:
        raise CliError(
            f"--surface-samples must be at most 2**26 = {MAX_SURFACE_SAMPLES}; got {args.surface_samples}"
        )
    _check_device_name(args.device)
    output = _check_output(args.output, _POINT_OUT_SUFFIXES)
    indices_out = _check_output(args.indices, _INDEX_OUT_SUFFIXES, "--indices") if args.indices else None

    import torch

    import warpgeo

    device = _device(args.device)
    with _bar(4, "sample", args.quiet) as bar:
        bar.set_description("reading")
        loaded = read_points_or_mesh(args.input)
        bar.update(1)
        if isinstance(loaded, Cloud):
            cloud = loaded if not args.xyz_only else Cloud(loaded.points)
            source = _plural(len(cloud.points), "point")
            if cloud.attributes:
                source += f" with {_plural(len(cloud.attributes), 'attribute')} ({_names(cloud.attributes)})"
        else:
            import trimesh

            if indices_out is not None:
                raise CliError("--indices needs a point-cloud input (a mesh's surface samples are not saved)")
            count = args.surface_samples or max(20 * args.k, 50_000)
            if count > MAX_SURFACE_SAMPLES:
                raise CliError(
                    f"-k {args.k}: a mesh surface is sampled with 20 K = {count} points, more than the "
                    f"{MAX_SURFACE_SAMPLES} (2**26) allowed; use a smaller -k or --surface-samples"
                )
            bar.set_description("surface sampling")
            samples, _ = trimesh.sample.sample_surface(loaded, count, seed=args.seed)
            cloud = Cloud(samples.astype(np.float32))  # float32: what FPS runs on for a mesh
            source = f"{_plural(len(loaded.faces), 'triangle')}, {_plural(count, 'surface sample')}"
        bar.update(1)
        bar.set_description("farthest point sampling")
        n = len(cloud.points)
        points = torch.as_tensor(cloud.points, device=device)
        idx = warpgeo.farthest_point_sampling(points, min(args.k, n), start_index=0).cpu().numpy()
        chosen = cloud.take(idx)
        bar.update(1)
        bar.set_description("writing")
        write_cloud(chosen, output)
        if indices_out is not None:
            write_values(idx.astype(np.int64), indices_out)
        bar.update(1)
    note = "" if args.k <= n else f" (only {_plural(n, 'point')} in the input)"
    also = f", their indices -> {indices_out}" if indices_out is not None else ""
    print(f"{args.input} ({source}) -> {_plural(len(idx), 'farthest point')}{note} -> {output}{also}")
    return 0


def cmd_sdf(args: argparse.Namespace) -> int:
    _positive(args.chunk, "--chunk")
    _check_device_name(args.device)
    output = _check_output(args.output, (".npy", ".txt"))

    import torch

    import warpgeo

    device = _device(args.device)
    mesh = read_mesh(args.mesh)
    points, ignored = read_points(args.points)
    sign_method = args.sign_method
    how = sign_method
    if sign_method == "auto":
        sign_method = "ray" if mesh.is_watertight else "winding"
        how = f"{sign_method}: auto, the mesh is {'closed' if mesh.is_watertight else 'open'}"
        if not mesh.is_watertight:
            print(
                f"note: {args.mesh} is not watertight (open, or with holes): inside is told by winding "
                "number (--sign-method winding). For a thin shell or an open container (a bin, a shelf) "
                "use --sign-method unsigned (distances >= 0).",
                file=sys.stderr,
            )
    elif sign_method in ("ray", "normal") and not mesh.is_watertight:
        print(
            f"note: {args.mesh} is not watertight (open, or with holes): --sign-method {sign_method} may call "
            "points in an opening inside (negative distances). Use --sign-method winding for an open mesh, or "
            "--sign-method unsigned for a thin shell or an open container (a bin, a shelf).",
            file=sys.stderr,
        )
    try:
        with warnings.catch_warnings():
            # the note above is the CLI's word on open meshes: the library's warning would say it twice
            warnings.filterwarnings("ignore", message="MeshWorld: .*open mesh", category=UserWarning)
            world = warpgeo.MeshWorld([mesh], device=str(device), sign_method=sign_method)
    except RuntimeError as exc:  # e.g. a Warp build without winding-number support
        raise CliError(f"cannot use {args.mesh} with --sign-method {sign_method}: {_reason(exc)}") from exc
    flat = torch.as_tensor(np.ascontiguousarray(points.reshape(-1, 3)), device=device)  # float32 or float64
    parts = []
    chunks = flat.split(args.chunk)
    with _bar(len(chunks), "signed distance", args.quiet) as bar, torch.no_grad():
        for chunk in chunks:
            parts.append(warpgeo.signed_distance(chunk, world).cpu())
            bar.update(1)
    sd = torch.cat(parts).numpy().reshape(points.shape[:-1])
    write_values(sd, output)
    inside = int((sd < 0).sum())
    note = f" (ignored {_plural(ignored, 'attribute column')})" if ignored else ""
    print(
        f"{_plural(flat.shape[0], 'point')}{note} vs {args.mesh} ({_plural(len(mesh.faces), 'triangle')}, "
        f"sign by {how}): {inside} inside, distance in [{sd.min():.4g}, {sd.max():.4g}] "
        f"({sd.dtype}) -> {output}"
    )
    return 0


# --------------------------------------------------------------------------------------------------------
# parser and entry point
# --------------------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors as one line (``warpgeo: error: ...; see warpgeo sample --help``)."""

    def error(self, message: str):
        raise CliError(f"{message} (see {self.prog} --help)")


def cmd_warmup(args: argparse.Namespace) -> int:
    """Compile every kernel module for a device into Warp's kernel cache."""
    from ._warmup import warmup

    _check_device_name(args.device)
    warmup(str(_device(args.device)), quiet=args.quiet)
    return 0


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

    parser = _Parser(
        prog="warpgeo",
        description="Differentiable geometry ops for PyTorch, written as NVIDIA Warp kernels.",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"warpgeo {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="run the collision-avoidance, sampling and arm demos, write PNGs (needs warpgeo[demo])",
        description="Run the collision-avoidance, farthest-point-sampling and 7-DoF arm demos on generated data and "
        'write their pictures to a folder. Needs matplotlib: python3 -m pip install "warpgeo[demo]".',
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
        "Output: .ply, .npy, .xyz, .txt. A cloud's columns after x, y, z (.ply: its other vertex "
        "properties, e.g. normals, colours) are kept for the chosen points, values and dtypes unchanged.",
    )
    sample.add_argument("input", metavar="MESH_OR_CLOUD", help="mesh or point-cloud file")
    sample.add_argument("-k", type=int, default=4096, help="number of points to keep (default: 4096)")
    sample.add_argument("-o", "--output", required=True, help="output cloud (.ply, .npy, .xyz, .txt)")
    sample.add_argument(
        "--indices",
        metavar="FILE",
        default=None,
        help="also write the chosen rows' indices into the input cloud (int64; .npy or .txt)",
    )
    sample.add_argument(
        "--xyz-only", action="store_true", help="write x, y, z only, not the cloud's other columns"
    )
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
        "(..., 3) (the output keeps its leading shape) or a .xyz/.txt/.ply cloud; columns after x, y, z "
        "are ignored. float64 points give float64 distances (text input counts as float64), the rest float32.",
    )
    sdf.add_argument("mesh", metavar="MESH", help="mesh file (.obj, .stl, .ply, .off, .glb)")
    sdf.add_argument("points", metavar="POINTS", help="query points (.npy, .xyz, .txt, .ply)")
    sdf.add_argument("-o", "--output", required=True, help="output distances (.npy or .txt)")
    sdf.add_argument(
        "--sign-method",
        choices=("auto", "ray", "winding", "normal", "unsigned"),
        default="auto",
        help="inside test: ray (closed meshes), winding (open meshes), normal (closed, consistently wound), "
        "unsigned (thin shells, open bins: distance >= 0); auto (default): ray if the mesh is watertight, "
        "else winding",
    )
    sdf.add_argument("--chunk", type=int, default=1 << 16, help="points per launch (default: 65536)")
    sdf.set_defaults(func=cmd_sdf)

    warm = sub.add_parser(
        "warmup",
        parents=[common],
        help="compile every kernel into Warp's kernel cache (Docker images, CI, cluster nodes)",
        description="Compile every warpgeo kernel module for a device into Warp's kernel cache, so that a "
        "process's first op call compiles nothing. Run it once per machine (or image) and device kind; "
        "into an empty cache it takes 30-60 s on 2 CPU cores (more on busy ones); modules already in the "
        "cache are only loaded (a few seconds in all).",
    )
    warm.set_defaults(func=cmd_warmup)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``warpgeo`` command; returns the exit code (``--help`` and ``--version`` exit with 0)."""
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        for name, default in (("device", None), ("debug", False), ("quiet", False)):
            if not hasattr(args, name):
                setattr(args, name, default)
        return args.func(args)
    except CliError as exc:
        if debug:
            raise
        print(f"warpgeo: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (ValueError, TypeError, IndexError, OSError) as exc:
        # What the ops raise on bad data (and the OS on unwritable paths) is still the user's input.
        if debug:
            raise
        print(
            f"warpgeo: error: {type(exc).__name__}: {_reason(exc)} (--debug shows the traceback)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("warpgeo: interrupted", file=sys.stderr)
        return 130
