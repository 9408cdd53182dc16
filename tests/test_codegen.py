"""CUDA code generation, checked on every run, GPU or not.

Every Warp module of every kernel table of ``warpgeo._kernels`` (the files found with pkgutil: modules come
and go; ``warpgeo._warmup.kernel_modules``, what ``warpgeo warmup`` compiles) is compiled ahead of time to PTX for sm_80 (A100) and sm_90 (H100) with ``wp.compile_aot_module``, through NVRTC, which Warp
ships: no GPU or CUDA driver is needed. A module is Warp's compilation unit, so one build covers every
kernel in it and every overload (dtype instance) the ops launch; the test checks the PTX has an entry point
for each of them. Tile kernels depend on the block size (``wp.block_dim()``, tile shapes), so a module is
built for the ``block_dim`` its table declares (Warp's default where none), and the ops launch with no
other (see :func:`launch_block_dims`).

Output goes to pytest's temporary directory; nothing is cached in the repository. NVRTC takes a few
seconds per module and architecture.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import warpgeo
import warpgeo._kernels
from warpgeo._warmup import kernel_modules as _table_modules  # what `warpgeo warmup` compiles

ARCHS = (80, 90)
#: Warp's launch size when a launch names no block_dim (``Module.options["block_dim"]``'s default).
_WARP_DEFAULT_BLOCK_DIM = 256
#: warpgeo modules that are not ops (they launch nothing of their own).
_NOT_OPS = {
    "_kernels",
    "_warp",
    "_launch",
    "checks",
    "_warmup",
    "_op",
    "_constants",
    "cli",
    "demos",
    "compat",
    "__main__",
}


def kernel_modules() -> dict[str, tuple[str, int]]:
    """Warp module name -> (a readable id ``<kernel file>:<module>``, the block size its launches use)."""
    found = {}
    for table, _key, name in _table_modules():
        file = table.name.removeprefix("warpgeo._kernels.").split(".")[0]
        block_dim = table.block_dim if table.block_dim is not None else _WARP_DEFAULT_BLOCK_DIM
        found[name] = (f"{file}:{name.rsplit('.', 1)[-1]}", block_dim)
    return found


def _wp():
    import warp as wp

    return wp


def launch_block_dims() -> set[int]:
    """Every ``block_dim`` the ops pass to a launch, and Warp's default for launches that pass none.

    Read from the op modules' source: each ``block_dim=<value>`` keyword must be an int literal, ``None``,
    a module-level int constant of that op module, or a kernel table's ``.block_dim``; anything else fails
    here, so that no block size escapes the build below.
    """
    dims = {_WARP_DEFAULT_BLOCK_DIM}
    for info in pkgutil.iter_modules(warpgeo.__path__, prefix="warpgeo."):
        if info.name.split(".")[-1] in _NOT_OPS:
            continue
        module = importlib.import_module(info.name)
        tree = ast.parse(inspect.getsource(module))
        for node in ast.walk(tree):
            if not isinstance(node, ast.keyword) or node.arg != "block_dim":
                continue
            value = node.value
            if isinstance(value, ast.Constant) and (value.value is None or isinstance(value.value, int)):
                if value.value is not None:
                    dims.add(value.value)
            elif isinstance(value, ast.Name) and isinstance(getattr(module, value.id, None), int):
                dims.add(getattr(module, value.id))
            elif isinstance(value, ast.Attribute) and value.attr == "block_dim":
                pass  # a kernel table's own block size (``table.block_dim``): built as the table says
            elif isinstance(value, ast.Attribute) and isinstance(_module_constant(module, value), int):
                dims.add(_module_constant(module, value))  # e.g. ``kernels.BUILD_BLOCK_DIM``
            else:
                raise AssertionError(
                    f"{info.name} line {node.lineno}: block_dim={ast.unparse(value)} is not an int literal or "
                    "a module-level int constant (or a dotted one); test_codegen cannot tell which block size to build"
                )
    return dims


def _module_constant(module, node: ast.Attribute):
    """The value of a dotted name such as ``kernels.BUILD_BLOCK_DIM`` in ``module``'s namespace (None if a
    part is missing)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    value = getattr(module, node.id, None)
    for part in reversed(parts):
        value = getattr(value, part, None)
    return value


def _entry_points(ptx: str) -> dict[str, int]:
    """Kernel key -> number of forward entry points (overloads) in a PTX file."""
    counts: dict[str, int] = {}
    for name in re.findall(r"\.entry\s+(\w+)_cuda_kernel_forward\b", ptx):
        key = re.sub(r"_[0-9a-f]{8}$", "", name)
        counts[key] = counts.get(key, 0) + 1
    return counts


def compile_for_cuda(module_name: str, arch: int, block_dim: int, out_dir: Path) -> Path:
    """Build ``module_name`` to PTX for ``sm_<arch>`` with ``block_dim`` threads per block; return the PTX.

    Raises whatever Warp raises when code generation or NVRTC fails, and AssertionError when the PTX lacks
    an entry point for a kernel or one of its overloads.
    """
    wp = _wp()
    module = wp.get_module(module_name)
    expected = {}
    for key, kernel in module.kernels.items():
        if kernel.is_generic:
            assert kernel.overloads, (
                f"{module_name}.{key} is generic with no overload: it would be skipped (add wp.overload)"
            )
            expected[key] = len(kernel.overloads)
        else:
            expected[key] = 1
    default = module.options["block_dim"]
    if block_dim != default:
        wp.set_module_options({"block_dim": block_dim}, module)
    try:
        paths = wp.compile_aot_module(module, arch=arch, module_dir=out_dir, use_ptx=True)
    finally:
        if block_dim != default:
            wp.set_module_options({"block_dim": default}, module)
    (ptx_path,) = paths
    ptx = Path(ptx_path).read_text()
    assert f".target sm_{arch}" in ptx, f"{ptx_path} does not target sm_{arch}"
    found = _entry_points(ptx)
    missing = {key: n for key, n in expected.items() if found.get(key, 0) < n}
    assert not missing, (
        f"{module_name}: PTX for sm_{arch} lacks entry points (kernel: overloads) {missing}; found {found}"
    )
    return Path(ptx_path)


# --------------------------------------------------------------------------------------------------------


def test_discovery():
    """The modules and block sizes the build below covers (a discovery that finds nothing would pass)."""
    modules = kernel_modules()
    homes = {ident.split(":")[0] for ident, _ in modules.values()}
    assert {"fps", "gather", "neighbors", "sdf"} <= homes, homes
    # every kernel lives in a table: no module-level @wp.kernel that warmup and this check would miss
    for info in pkgutil.iter_modules(warpgeo._kernels.__path__):
        module = importlib.import_module(f"warpgeo._kernels.{info.name}")
        stray = [k for k, v in vars(module).items() if type(v).__name__ == "Kernel"]
        assert not stray, f"warpgeo._kernels.{info.name}: kernels outside a KernelTable: {stray}"
    # the ops launch with no block size other than the tables' (or Warp's default)
    assert launch_block_dims() <= {b for _, b in modules.values()} | {_WARP_DEFAULT_BLOCK_DIM}


_MODULES = kernel_modules()


@pytest.mark.parametrize("module_name", list(_MODULES), ids=[ident for ident, _ in _MODULES.values()])
def test_kernels_compile_for_cuda(module_name, tmp_path):
    """Each module for every architecture at its launch block size, the architectures side by side (NVRTC
    runs outside Warp's code-generation lock, so two builds take about the time of one on two cores)."""
    block_dim = _MODULES[module_name][1]
    with ThreadPoolExecutor(max_workers=len(ARCHS)) as pool:
        builds = [
            pool.submit(
                compile_for_cuda, module_name, arch, block_dim, tmp_path / f"sm{arch}-block{block_dim}"
            )
            for arch in ARCHS
        ]
        for build in builds:
            build.result()


_BROKEN_MODULE = '''
import warp as wp

# valid C++ for the CPU build; on CUDA (__CUDA_ARCH__ defined) it calls a function that does not exist
SNIPPET = """
#if defined(__CUDA_ARCH__)
    no_such_cuda_function(x);
#endif
    return x + 1.0f;
"""


@wp.func_native(SNIPPET)
def plus_one(x: float) -> float: ...


@wp.kernel
def add_one(a: wp.array(dtype=float)):
    i = wp.tid()
    a[i] = plus_one(a[i])
'''


_TILED_MODULE = """
import warp as wp


@wp.kernel
def block_sum(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i, lane = wp.tid()
    v = a[lane] + 0.0
    total = wp.tile_sum(wp.tile(v))
    if lane == 0:
        out[i] = total[0]
"""


def _import_temp_module(tmp_path: Path, name: str, source: str):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def test_cuda_only_error_is_caught(tmp_path):
    """A kernel whose CPU build is fine and whose CUDA build is broken fails the check."""
    wp = _wp()
    module = _import_temp_module(tmp_path, f"warpgeo_codegen_broken_{tmp_path.name}", _BROKEN_MODULE)
    a = wp.array([1.0, 2.0], dtype=float, device="cpu")
    wp.launch(module.add_one, dim=2, inputs=[a], device="cpu")
    assert a.numpy().tolist() == [2.0, 3.0]  # the CPU path compiles and runs
    with pytest.raises(Exception, match="CUDA kernel build failed"):
        compile_for_cuda(module.__name__, 90, _WARP_DEFAULT_BLOCK_DIM, tmp_path / "out")


def test_block_dim_reaches_the_build(tmp_path):
    """A module built for another block size gets that size compiled in, and the module's default is back
    afterwards (the check changes nothing for later launches)."""
    wp = _wp()
    module = _import_temp_module(tmp_path, f"warpgeo_codegen_tiled_{tmp_path.name}", _TILED_MODULE)
    name = module.__name__
    compile_for_cuda(name, 80, 64, tmp_path / "b64")
    source = next((tmp_path / "b64").glob("*.cu")).read_text()
    assert re.search(r"#define WP_TILE_BLOCK_DIM 64\b", source)
    assert wp.get_module(name).options["block_dim"] == _WARP_DEFAULT_BLOCK_DIM


_UNINSTANTIATED_MODULE = """
from typing import Any

import warp as wp


@wp.kernel
def concrete(a: wp.array(dtype=float)):
    a[wp.tid()] = 1.0


@wp.kernel
def generic(a: wp.array(dtype=Any)):
    a[wp.tid()] = a.dtype(1)
"""


def test_generic_kernel_without_overload_is_caught(tmp_path):
    """Warp skips a generic kernel with no instance (a warning, no error); the check refuses it."""
    module = _import_temp_module(tmp_path, f"warpgeo_codegen_generic_{tmp_path.name}", _UNINSTANTIATED_MODULE)
    with pytest.raises(AssertionError, match="generic with no overload"):
        compile_for_cuda(module.__name__, 90, _WARP_DEFAULT_BLOCK_DIM, tmp_path / "out")


def test_tile_kernels_are_built_at_their_block_size():
    """The one-block-per-cloud FPS kernel (CUDA only, tiled) is built at the block size of its table."""
    tiled = [(table, key) for table, key, _ in _table_modules() if table.block_dim is not None]
    assert any(table.name.endswith("fps_cuda.fps_block") and table.cuda_only for table, _ in tiled), tiled
    for table, key in tiled:
        assert _MODULES[table.module_name(key)][1] == table.block_dim


def test_register_cap_reaches_the_ptx(tmp_path):
    """The SDF query kernels' register cap (``_constants.SDF_MAX_REGISTERS``) is in their PTX (``.maxnreg``),
    per precision; a kernel table without a cap has none."""
    from warpgeo import _constants
    from warpgeo._kernels import sdf

    for key in sdf.SPHERE_MESH_COST.types:
        _, name = next((k, n) for k, n in sdf.SPHERE_MESH_COST.modules() if k == key)
        ptx = compile_for_cuda(name, 90, _WARP_DEFAULT_BLOCK_DIM, tmp_path / name).read_text()
        caps = set(re.findall(r"\.maxnreg\s+(\d+)", ptx))
        assert caps == {str(_constants.SDF_MAX_REGISTERS[key[0]])}, (key, caps)
    from warpgeo._kernels import fps

    _, name = next(iter(fps.FPS_SERIAL.modules()))
    ptx = compile_for_cuda(name, 90, _WARP_DEFAULT_BLOCK_DIM, tmp_path / name).read_text()
    assert not re.findall(r"\.maxnreg\s+\d+", ptx)


def test_cuda_modules_are_cached_as_cubins(tmp_path):
    """Every warpgeo module asks Warp for a cubin (machine code for the device, loaded as it is by a new
    process) rather than PTX (compiled again by the driver wherever its own cache misses), and a module so
    configured builds to an sm_90 ELF image through NVRTC, as Warp's first launch on an H100/H200 does."""
    wp = _wp()
    tables = {table.module_name(key): table for table, key, _ in _table_modules()}
    for name in tables:
        assert wp.get_module(name).options.get("cuda_output") == "cubin", name
    from warpgeo._kernels import sdf

    _, name = next(iter(sdf.SPHERE_MESH_COST.modules()))
    (path,) = wp.compile_aot_module(wp.get_module(name), arch=90, module_dir=tmp_path)
    assert str(path).endswith(".sm90.cubin"), path
    assert Path(path).read_bytes()[:4] == b"\x7fELF", path
