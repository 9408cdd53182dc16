"""Pure Warp kernels (no torch import). Each file is one Warp module, compiled once and cached.

Op modules import their kernel module by name at the top (``from ._kernels import fps as kernels``); that
imports Warp (cheap) but initialises nothing and compiles nothing: a table's Warp module is built on its
first lookup and compiled (or loaded from Warp's cache) on its first launch.
"""

import sys

#: Whether Warp was imported before warpgeo first imported it (the user's own ``import warp``):
#: ``warpgeo._warp`` then leaves Warp's messages at init alone.
WARP_IMPORTED_BY_USER = "warp" in sys.modules
