"""Install-time step: compile warpgeo's Warp kernels for this machine's CPU (see warpgeo/_aot.py).

Everything else about the package is in pyproject.toml. ``build_py`` runs ``python -m warpgeo._aot build``
after its usual work, into the wheel (``pip install .``) or into the source tree (``pip install -e .``,
where ``warpgeo/compiled-kernels/`` is ignored by git). The build takes ~30 s on two cores. It never fails an install:
where it cannot run (no Warp in the build environment, a compiler error, ``WARPGEO_AOT=0``), warpgeo
compiles each kernel module at its first use instead, as Warp does by default.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class build_py_with_kernels(build_py):
    def run(self) -> None:
        super().run()
        if os.environ.get("WARPGEO_AOT", "1").strip() in ("0", "false", "off", "no"):
            self.announce("warpgeo: WARPGEO_AOT=0, kernels left to compile at first use", level=2)
            return
        # the folder warpgeo._aot.ROOT names, in the source tree or in the wheel's tree
        if getattr(self, "editable_mode", False):
            target = HERE / "warpgeo" / "compiled-kernels"
        else:
            target = Path(self.build_lib).absolute() / "warpgeo" / "compiled-kernels"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
        try:
            result = subprocess.run(
                [sys.executable, "-m", "warpgeo._aot", "build", str(target)],
                cwd=HERE,
                env=env,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=900,
            )
        except Exception as error:  # never fail the install for it
            self.warn(f"warpgeo: kernels not compiled at install ({error}); they compile at first use")
            return
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
            self.warn(
                f"warpgeo: kernels not (all) compiled at install; the rest compile at first use:\n{tail}"
            )
        else:
            self.announce(result.stdout.strip(), level=2)


setup(cmdclass={"build_py": build_py_with_kernels})
