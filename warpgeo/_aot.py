"""warpgeo's CPU kernels, compiled when the package is installed and loaded from it at first use.

Warp compiles a kernel module the first time it runs (~1-4 s each on a CPU, most of it Clang parsing
Warp's headers) and keeps the object in its kernel cache. ``pip install`` runs :func:`build` (``setup.py``'s
build hook, ``python -m warpgeo._aot build DIR``): every Warp module of ``warpgeo._kernels`` is compiled for
this machine's CPU, as a CPU launch loads it (one thread per block), and its object and metadata files are
kept in the package, under ``compiled-kernels/<Warp version>/<module id>/`` (a folder name that is not a
Python identifier: setuptools never takes it for a namespace package beside this module). At run time :func:`preload` hands Warp
that object before a module's first launch, so a process's first call costs no compile, whatever the
state of Warp's cache.

Nothing here can load the wrong code. Warp names a module's files by the hash of the module (its kernels'
source, their argument types, the module's options and Warp's own settings) and a CPU object by the
compiler's target (LLVM version, target triple and, under Warp's default ``-march=native``, the host's
instruction-set features). :func:`preload` looks the files up by the names the running Warp gives them,
in the folder of the running Warp version: a kernel edited since the install, another Warp version,
other compile settings or another CPU find no file, and Warp compiles the module as it would have.

``WARPGEO_AOT=0`` turns the loading off (and the build, at install time). CUDA modules are compiled by
Warp at first use, as before (their PTX does not depend on the host and Warp caches it).

Imports Warp and ``warpgeo._kernels`` only (no torch): the build runs in pip's build environment.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import pkgutil
import shutil
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

#: where the build puts the objects: the package's own folder (an editable install) or the wheel's copy of it
ROOT = Path(__file__).resolve().with_name("compiled-kernels")
#: the manifest written beside the objects of one Warp version
MANIFEST = "manifest.json"
#: CPU launches run one thread per block (Warp's CPU default): the only variant a CPU launch loads
CPU_BLOCK_DIM = 1

_state: dict[str, Any] = {}
_LOCK = threading.Lock()


def enabled() -> bool:
    return os.environ.get("WARPGEO_AOT", "1").strip() not in ("0", "false", "off", "no")


def _version_dir() -> Path | None:
    """The running Warp version's folder of shipped objects, or None (checked once per process)."""
    if "dir" not in _state:
        import warp

        folder = ROOT / str(warp.config.version)
        try:
            _state["dir"] = folder if folder.is_dir() else None
        except OSError:  # unreadable: as if absent
            _state["dir"] = None
    return _state["dir"]


def preload(module: Any, device: Any, block_dim: int | None) -> bool:
    """Load ``module`` on ``device`` (a Warp device) from the shipped objects, if they hold it; True then.

    Only CPU launches with Warp's CPU block size (``block_dim`` None or 1) are served, and only modules
    named by their hash (not ``strip_hash``); a module already loaded is left as it is. The loaded object
    must define every kernel of the module, else it is dropped. Anything else, a missing or unreadable
    file or a failing load, returns False and Warp builds the module as usual.
    """
    if not device.is_cpu or block_dim not in (None, CPU_BLOCK_DIM) or not enabled():
        return False
    folder = _version_dir()
    if folder is None:
        return False
    with _LOCK:  # two threads' first launches load the module once
        try:
            if module.options.get("strip_hash", False):
                return False
            exec_ = module.execs.get((None, CPU_BLOCK_DIM))
            if exec_ is not None and exec_.module_hash == module.get_module_hash(CPU_BLOCK_DIM):
                return False
            ident = module.get_module_identifier(CPU_BLOCK_DIM)
            binary = folder / ident / module._get_compile_output_name(device, block_dim=CPU_BLOCK_DIM)
            meta = folder / ident / module._get_meta_name(block_dim=CPU_BLOCK_DIM)
            if not (binary.is_file() and meta.is_file()):
                return False
            loaded = module.load(
                device, CPU_BLOCK_DIM, binary_path=os.fspath(binary), meta_path=os.fspath(meta)
            )
            if loaded is None or not _defines_every_kernel(module, loaded):
                module.execs.pop((None, CPU_BLOCK_DIM), None)  # Warp builds it instead
                return False
        except Exception:  # an unexpected Warp, or a file it cannot load: it compiles the module itself
            module.execs.pop((None, CPU_BLOCK_DIM), None)
            return False
    return True


def _defines_every_kernel(module: Any, loaded: Any) -> bool:
    """Whether the loaded object has a forward entry point for every kernel (and overload) of ``module``:
    a file holding some other module's code under this one's name is refused, not launched."""
    for kernel in module.kernels.values():
        for instance in kernel.overloads.values() if kernel.is_generic else (kernel,):
            if loaded.get_kernel_hooks(instance).forward is None:
                return False
    return True


# -------------------------------------------------------------------------------------------------------
# which modules there are (the build below; tests/test_codegen.py builds the same ones for CUDA)


def kernel_modules() -> dict[str, str]:
    """Warp module name -> a readable id, for every Warp module holding kernels of ``warpgeo._kernels``.

    The Python modules are found with pkgutil and imported; their kernels live in the Warp module named
    after the Python module, or in modules of their own (``wp.kernel(module="unique")``, one compilation
    unit per kernel and precision), which Warp's module registry lists. Kernels a module creates on first
    use are created here: every ``build_all()`` of a module-level table and every module-level function
    marked ``lazy_kernel``.
    """
    from warp._src.context import user_modules

    import warpgeo._kernels

    packages = [
        info.name for info in pkgutil.iter_modules(warpgeo._kernels.__path__, prefix="warpgeo._kernels.")
    ]
    for name in packages:
        module = importlib.import_module(name)
        for value in list(vars(module).values()):
            if isinstance(value, type):
                continue
            if callable(getattr(value, "build_all", None)):
                value.build_all()
            elif callable(value) and getattr(value, "lazy_kernel", False):
                value()
    found = {}
    for name, module in list(user_modules.items()):
        homes = {getattr(k.func, "__module__", "") for k in module.kernels.values()}
        homes = {h for h in homes if h.startswith("warpgeo._kernels.")}
        if homes:
            keys = sorted(module.kernels)
            # a named module by its name (warpgeo._kernels.gather.rows_int32_single), one of Warp's "unique"
            # modules (named after their kernel and a hash) by its kernels
            shown = name.rsplit(".", 1)[-1] if "." in name else "+".join(keys)
            found[name] = f"{'+'.join(sorted(h.rsplit('.', 1)[1] for h in homes))}:{shown}"
    return dict(sorted(found.items(), key=lambda item: item[1]))


def sources_digest() -> str:
    """SHA-256 of the kernel sources (``warpgeo/_kernels/*.py``): which sources a build was made from."""
    digest = hashlib.sha256()
    folder = Path(__file__).resolve().parent / "_kernels"
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def cpu_modules() -> dict[str, str]:
    """:func:`kernel_modules` less those only CUDA launches (a Python module of ``warpgeo._kernels`` that sets
    ``CUDA_ONLY = True``): what the install compiles for the CPU."""
    found = {}
    for name, ident in kernel_modules().items():
        homes = ident.split(":", 1)[0].split("+")
        if all(getattr(importlib.import_module(f"warpgeo._kernels.{h}"), "CUDA_ONLY", False) for h in homes):
            continue
        found[name] = ident
    return found


def build(
    target: os.PathLike | str, *, workers: int | None = None, only: list[str] | None = None
) -> dict[str, Any]:
    """Compile every module of :func:`cpu_modules` (or those whose readable ids are in ``only``) for this
    CPU into ``target/<Warp version>/``.

    Runs in a process of its own (it points Warp's kernel cache at a temporary folder before Warp starts:
    ``python -m warpgeo._aot build TARGET``). The folder is replaced as a whole, readable by every user. A
    module that fails to build is left out and listed under ``"failed"`` in the manifest written beside the
    objects, which is returned (Warp compiles that module at first use).
    """
    cache = tempfile.mkdtemp(prefix="warpgeo-aot-")
    os.environ["WARP_CACHE_PATH"] = cache
    import warp as wp

    if wp._src.context.runtime is not None:
        raise RuntimeError("warpgeo._aot.build must run before Warp is initialised (a process of its own)")
    wp.config.log_level = wp.LOG_ERROR
    wp.init()
    cpu = wp.get_device("cpu")
    target = Path(target).absolute()
    version = str(wp.config.version)
    target.mkdir(parents=True, exist_ok=True)
    for stale in target.glob(f".{version}-*"):  # the staging folder of a build that was killed
        shutil.rmtree(stale, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=target))
    staging.chmod(0o755)  # mkdtemp makes it private; the package's files are read by every user
    names = cpu_modules()
    if only is not None:
        unknown = set(only) - set(names.values())
        if unknown:
            raise ValueError(f"no such kernel modules: {sorted(unknown)}")
        names = {name: ident for name, ident in names.items() if ident in only}

    def one(name: str) -> tuple[str, str | None]:
        try:
            module = wp.get_module(name)
            module.load(cpu, CPU_BLOCK_DIM)
            ident = module.get_module_identifier(CPU_BLOCK_DIM)
            source = Path(wp.config.kernel_cache_dir) / ident
            out = staging / ident
            out.mkdir()
            for file in (
                module._get_compile_output_name(cpu, block_dim=CPU_BLOCK_DIM),
                module._get_meta_name(block_dim=CPU_BLOCK_DIM),
            ):
                shutil.copyfile(source / file, out / file)
            return ident, None
        except Exception as error:
            return names[name], f"{type(error).__name__}: {error}"

    try:
        with ThreadPoolExecutor(max_workers=workers or min(4, os.cpu_count() or 1)) as pool:
            results = list(pool.map(one, names))
        manifest = {
            "warp": version,
            "sources": sources_digest(),
            "modules": {
                ident: names[name] for name, (ident, err) in zip(names, results, strict=True) if err is None
            },
            "failed": {ident: err for ident, err in results if err is not None},
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        final = target / version
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
    return manifest


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[0] != "build":
        print("usage: python -m warpgeo._aot build TARGET [MODULE ID ...]", file=sys.stderr)
        return 2
    manifest = build(args[1], only=args[2:] or None)
    print(f"warpgeo: {len(manifest['modules'])} kernel modules compiled for this CPU into {args[1]}")
    for ident, error in manifest["failed"].items():
        print(f"warpgeo: {ident} not compiled ({error}); Warp compiles it at first use", file=sys.stderr)
    return 1 if manifest["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
