"""benchmarks/bench_raycast.py with raycast's ray ordering switched off (the code path before this round).

PYTHONPATH=<worktree> python3 bench_no_order.py --device cpu --repeat 3
"""

import runpy
import sys
from pathlib import Path

import warpgeo._ray_order as ro

ro._SORT_MIN_RAYS = 1 << 62
sys.argv = ["bench_raycast.py", *sys.argv[1:]]
runpy.run_path(str(Path(__file__).resolve().parents[2] / "bench_raycast.py"), run_name="__main__")
