"""One command for a GPU machine: tests on CUDA, every benchmark, one results file.

    python benchmarks/gpu_check.py                         # CUDA, full: tests, then benchmarks
    python benchmarks/gpu_check.py --quick                 # small sizes, CUDA-parametrised tests only
    python benchmarks/gpu_check.py --only tests --out $OUT/tests.md     # one command of <= 10 minutes
    python benchmarks/gpu_check.py --only bench --out $OUT/bench.md     # and the other
    python benchmarks/gpu_check.py --only tests --shard 1/2 --out $OUT/tests1.md   # a suite too long for one
    python benchmarks/gpu_check.py --merge tests.md bench.md --out benchmarks/results/<date>-<gpu>.md
    python benchmarks/gpu_check.py --device cpu --quick --out /tmp/cpu-check.md   # the flow, on the CPU
    python benchmarks/gpu_check.py --dry-run               # the plan: steps, commands, keys; runs nothing

**The lease plan of issue 49 (one call for everything).** The tests' steps run at once (``--jobs 4``, the
default on CUDA: the graph-replay and sync checks and the CUDA half in four parts of about equal size, six
processes on the GPU machine's 16 cores, each reported on its own line, ``full_suite`` their sum), within the
budget less ``--bench-reserve`` (330 s); the benchmarks then run one at a time (timings undisturbed). So a
whole run fits one command: after the ``.gpu/part.00`` call below, ``carry [".gpu/part.01", ".gpu/unpack",
".peers/curobo"]``, ``timeout_s 580``::

    eval "$(bash .gpu/unpack 2)" && mkdir -p /tmp/gc && python benchmarks/gpu_check.py --budget 540 --out /tmp/gc/check.md --scratch /tmp/gc/junit > /tmp/gc/check.log 2>&1; cp /tmp/gc/check.* $OUT/; awk '/gpu_check:figures -->/,/[/]gpu_check:figures/' /tmp/gc/check.md

(a start, ~15 s, then 9 minutes: ~12 of the 15; ``--dry-run`` prints the plan here first). The arithmetic:
bench_host 45 s, then the tests at once within 540 - 45 - 330 = 165 s (one after another they took ~290 s
on the H200: graph 48 + sync 42 + the CUDA half ~200), then >= 330 s of benchmarks (the H200 run's took
218 s; bench_robot, bench_distance_grid and bench_raycast are new, est. 150 s; a cut falls on the last
in ``PRIORITY`` order, after issue 49's figures). Not yet run on a
GPU: the parallel test steps are new (Warp's kernel cache shared by six processes: Warp 1.19 builds a
module in a directory of its process and renames it into the cache, the first one wins); if they fail, the
three-call plan below still works (``--jobs 1``).

**The earlier lease plan (issue 36: 15 minutes of device time, a command of at most 10).** The whole check no
longer
fits one command: on the H200 of 2026-11-26 the tests needed ~330 s (the CUDA half alone ~230 s with an
empty Warp cache) and the benchmarks ~300 s. Before the lease, here (no device time): ``../shared/gpu/pack``
(``.gpu/part.00``, ``.gpu/part.01``, ``.gpu/unpack``: warp-lang, trimesh, rtree, pyyaml, torch-fps for Python
3.12); cuRobo's v0.7 files into ``.peers/curobo`` (git-ignored, never committed: the recipe is in
``benchmarks/bench_curobo_call.py``'s docstring, ``fetch github:NVlabs/curobo`` then two ``git show
v0.7.8:...``), and ``python benchmarks/bench_curobo_call.py --quick`` must print ``cuRobo: ... imported from
.peers/curobo``. Then three ``run`` calls back to back (the machine forgets the parts, and ``/tmp``, when it
goes cold; ``$OUT`` is empty at each call, so the results live in ``/tmp/gc`` and are copied out):

1. ``carry [".gpu/part.00", ".gpu/unpack"]``, ``timeout_s 120``: ``bash .gpu/unpack 2 || true``
   (prints ``1 of 2``; ~15 s on the H200);
2. ``carry [".gpu/part.01", ".gpu/unpack", ".peers/curobo"]`` (~50 MiB of the 64), ``timeout_s 370``::

       eval "$(bash .gpu/unpack 2)" && mkdir -p /tmp/gc && python benchmarks/gpu_check.py --only tests --budget 330 --out /tmp/gc/check.md --scratch /tmp/gc/junit > /tmp/gc/tests.log 2>&1; cp /tmp/gc/check.* /tmp/gc/tests.log $OUT/; tail -3 /tmp/gc/tests.log

3. at once, ``carry [".gpu/unpack", ".peers/curobo"]``, ``timeout_s 360``::

       eval "$(bash .gpu/unpack 2)" && python benchmarks/gpu_check.py --only bench --budget 330 --out /tmp/gc/check.md --scratch /tmp/gc/junit > /tmp/gc/bench.log 2>&1; cp /tmp/gc/check.* /tmp/gc/bench.log $OUT/; awk '/gpu_check:figures -->/,/[/]gpu_check:figures/' /tmp/gc/check.md

   Device time: a start (1-2 minutes) + ~20 s + 5.5 + 5.5 minutes: ~13 of the 15 (a cut falls on the last benchmarks: ``PRIORITY``); give the machine back
   right after. The same ``--out`` in both calls makes one .md and one .json (``bench_host`` runs first of
   the benchmarks: ``PRIORITY``).

Then here: copy the last call's ``$OUT/check.md`` to ``benchmarks/results/<date>-<gpu>.md`` and ``$OUT/check.json`` (the
``--json`` figures: **the results JSON is always ``<--out>`` with ``.json``**, rewritten after each step) to
``benchmarks/results/<date>-<gpu>.json``; README's GPU table from the figures.

**Expected times** within ``--budget`` 540 s (H200, 2026-11-26, ``benchmarks/results/2026-11-26-nvidia-h200.md``,
an empty Warp cache; "est." = not yet measured on a GPU):

=========================================================  ===========================================
step                                                       time
=========================================================  ===========================================
bench_host (first, before the tests: issue 36's step 1)    est. 30 s (torch.profiler trace included)
tests: graph-replay + sync checks                          51 s measured
tests: the CUDA half (``-k cuda``, CUDA_ONLY files)        83 s measured (448 tests); est. 100-140 s now
                                                           (primitives, pending tables, test_cuda_only
                                                           and FPS's grid designs added since)
bench_targets (1M cost, swept, signed distance, gather,    40 s measured; est. 45 s with the new
replay)                                                    signed-distance row
bench_fps ``--cases`` x3 ``--designs``                     est. 30-60 s (NVRTC builds of each design)
bench_curobo_call (cuRobo's own Functions, graphs, 1M)     est. 30-45 s (NVRTC builds of cuRobo's two
                                                           kernels ~15 s)
bench_neighbors (8x2048x512, 8x16384x4096, 1x1Mx65536)     < 45 s measured (2 cases); est. 30 s
bench_chamfer, bench_gather                                < 45 s measured, ~10 s
bench_self_collision, bench_sdf                            est. 30 s, < 45 s measured
bench_world ``--quick``, bench_overhead ``--quick``        est. 20 s each (QUICK_ON_CUDA)
=========================================================  ===========================================

About 190 s of tests and 330 s of benchmarks: ~520 s. The tests may take the budget less
``--bench-reserve`` (270 s); the benchmarks run in ``PRIORITY`` order (issue 36's figures first), each
allowed twice its expected time (``EXPECTED_S``) or its even share of what is left, less 20 s kept for each
benchmark after it; a step that cannot start with 20 s left is not run, so a cut falls on the last ones
(bench_sdf, bench_overhead, bench_world).

Other uses::

    python benchmarks/gpu_check.py --only tests --out $OUT/tests.md     # one half per command
    python benchmarks/gpu_check.py --only bench --out $OUT/tests.md     # (same --out: one .md, one .json)

Steps, each a subprocess whose output is kept:

* tests: the graph-replay check (``tests/test_cuda_graphs.py``), the sync check
  (``tests/test_sync_free.py``, with ``torch.cuda.set_sync_debug_mode("error")`` on CUDA) and the CUDA half
  of the rest of the suite (``-k cuda``: the ``device`` fixture's CUDA parametrisations and the files
  ``tests/conftest.py`` lists in ``CUDA_ONLY``; the CPU halves are CI's). On the CPU, ``--quick`` runs the
  codegen test (CUDA code generation through NVRTC) in their place. ``-rs`` prints every skip with its
  reason: what did not run on CUDA.
* bench: ``bench_host`` first of all (before the tests, in a whole run), then every other
  ``benchmarks/bench_*.py`` (found by name, in ``PRIORITY`` order) with ``--device`` (and ``--quick``; on
  CUDA ``FULL_CUDA_ARGS``, ``QUICK_ON_CUDA``); the figures of those in ``JSON_FIGURES`` (``--json``) go into
  ``<results>.json`` beside the results file.

The results file (default ``benchmarks/results/<date>-<device slug>.md``) gets the device, versions, each
pytest summary line, issue 36's figures (each key's value, or why it is absent) and every benchmark's
output. The results JSON beside it holds ``device``, ``commit``, ``mode``, ``date``, ``versions``,
``full_suite`` (``passed``, ``failed``, ``skipped``, ``errors`` summed from the tests steps' pytest summary
lines; ``complete`` false where a step stopped before its summary line: then its progress dots were counted)
and every figure of the ``JSON_FIGURES`` benchmarks (ms: CUDA-event medians on CUDA; host µs: wall medians).
A figure that was not measured has no key; ``--quick`` writes keys naming its own sizes. Both files are
rewritten after each step, so a command stopped at its time limit leaves what it finished; ``--budget`` (seconds, default 540) stops starting steps that
would not finish in time and gives each step only the time left. ``--only`` writes its own section of the
file, so ``--only tests`` and ``--only bench`` into the same path (or ``--merge`` of two files) make one
file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import torch
from _common import device_name, version
from _gpu_steps import balanced, run_together

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = ROOT / "benchmarks"
TESTS = ROOT / "tests"
GRAPH_TESTS = "tests/test_cuda_graphs.py"
SYNC_TESTS = "tests/test_sync_free.py"
CODEGEN_TESTS = "tests/test_codegen.py"
#: extra arguments of a benchmark in full mode on CUDA (the GPU figures worth a GPU's time)
FULL_CUDA_ARGS = {
    # issue 35: the FPS designs A/B'd (block, steps, steps in a CUDA graph, persistent, auto) beside torch-fps
    "bench_fps": [
        "--cases",
        "1x100000x4096",
        "8x100000x4096",
        "32x8192x512",
        "--designs",
        "--no-numpy",
        "--no-torch-loop",
    ],
}
FULL_CUDA_ARGS["bench_neighbors"] = ["--cases", "8x2048x512", "8x16384x4096", "1x1048576x65536"]
# issue 37: a CUDA world of 256 environments of distinct objects (15.2 s on the H200 of 2026-11-26), with
# where its build goes (--rl-phases), and single meshes up to 1.3M faces (its goals: <= 1 s, <= 0.5 s)
FULL_CUDA_ARGS["bench_world"] = [
    "--only", "meshes", "rl", "--max-faces", "1400000", "--repeat", "1",
    "--rl-envs", "256", "--rl-repeat", "1", "--rl-phases",
]  # fmt: skip
#: secondary benchmarks run at ``--quick`` sizes on CUDA too (their full sizes do not fit the budget)
QUICK_ON_CUDA = ("bench_overhead",)
#: the order benchmarks run in (the rest after these, by name): issue 36's figures first, so that a budget cut
#: falls on the secondary ones; bench_host first, before anything else warms the GPU (issue 34's diagnosis)
PRIORITY = (
    "bench_host",
    "bench_targets",
    "bench_fps",
    "bench_curobo_call",
    "bench_neighbors",
    "bench_robot",
    "bench_distance_grid",
    "bench_raycast",
    "bench_chamfer",
    "bench_gather",
    "bench_self_collision",
    "bench_sdf",
)
#: expected seconds of each benchmark on an H100/H200 in full mode (measured on the H200 or estimated: the
#: docstring's table); a benchmark may take twice its figure (30 s where not listed), or more where the
#: budget allows, but never the last ``MIN_STEP_S`` of each benchmark after it
EXPECTED_S = {
    "bench_host": 30,
    "bench_targets": 45,
    "bench_fps": 60,
    "bench_curobo_call": 45,
    "bench_neighbors": 30,
    "bench_chamfer": 45,
    "bench_gather": 15,
    "bench_self_collision": 30,
    "bench_sdf": 40,
    "bench_overhead": 20,
    "bench_world": 60,
    # issue 49: not yet run on a GPU (estimates)
    "bench_robot": 45,
    "bench_distance_grid": 75,
    "bench_raycast": 90,
}
MIN_STEP_S = 20.0
#: benchmarks that write a flat ``{figure: value}`` with ``--json``: their figures go into the results JSON
#: (``<results>.json`` beside the .md; issue 36's keys, e.g. ``fps_b1_n100000_k4096_ms``)
JSON_FIGURES = (
    "bench_fps",
    "bench_self_collision",
    "bench_host",
    "bench_targets",
    "bench_neighbors",
    "bench_chamfer",
    "bench_gather",
    "bench_curobo_call",
    "bench_robot",
    "bench_distance_grid",
    "bench_raycast",
)
#: issue 36's figures and the benchmark that measures each (full sizes on CUDA: ``--quick`` writes keys
#: naming its own sizes instead); the .md lists each, with its value or why it is absent
ISSUE_KEYS = {
    "fps_b1_n100000_k4096_ms": "bench_fps",
    "fps_b8_n100000_k4096_ms": "bench_fps",
    "fps_b32_n8192_k512_ms": "bench_fps",
    "torch_fps_b1_n100000_k4096_ms": "bench_fps",
    "cost_1m_x4_fwd_bwd_ms": "bench_targets",
    "swept_h32_s4_fwd_bwd_ms": "bench_targets",
    "signed_distance_1m_ms": "bench_targets",
    "replay_host_us": "bench_targets",
    "gather_fwd_eager_host_us": "bench_gather",
    "torch_gather_fwd_eager_host_us": "bench_gather",
    "knn_b8_n2048_m512_k16_ms": "bench_neighbors",
    "chamfer_b8_n2048_fwd_ms": "bench_chamfer",
    "cdist_min_b8_n2048_ms": "bench_chamfer",
    "curobo_call_us": "bench_curobo_call",
    "warpgeo_call_us": "bench_curobo_call",
    "curobo_call_ratio": "bench_curobo_call",
    # issue 49's keys (a script not in benchmarks/ yet is reported absent, never an error)
    "torch_fps_b32_n8192_k512_ms": "bench_fps",
    "depth_fusion_640x480_ms": "bench_distance_grid",
    "grid_cost_1m_x4_fwd_bwd_ms": "bench_distance_grid",
    "robot_spheres_32k_fwd_bwd_ms": "bench_robot",
    "render_depth_1024x64x64_ms": "bench_raycast",
}
#: issue keys a benchmark writes under its own name (``--json``): ``{issue key: the benchmark's key}``, taken
#: in a full run on CUDA only (the benchmarks' full CUDA sizes are the issue's: 1M spheres in
#: ``world_4grids_fwd_bwd_ms`` on CUDA, the run's count on the CPU); an issue key written as it is wins.
ALIASES = {
    "depth_fusion_640x480_ms": "fuse_640x480_ms",
    "grid_cost_1m_x4_fwd_bwd_ms": "world_4grids_fwd_bwd_ms",
    "robot_spheres_32k_fwd_bwd_ms": "robot_spheres_fwd_bwd_b32768_ms",
    "render_depth_1024x64x64_ms": "render_depth_envs1024_64x64_cuda_ms",
}
_SECTION = re.compile(r"<!-- gpu_check:(\w+) -->\n(.*?)<!-- /gpu_check:\1 -->\n", re.S)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def benchmarks() -> list[Path]:
    """Every ``benchmarks/bench_*.py``, in :data:`PRIORITY` order, then the rest by name."""
    rank = {name: i for i, name in enumerate(PRIORITY)}
    return sorted(BENCH_DIR.glob("bench_*.py"), key=lambda p: (rank.get(p.stem, len(rank)), p.stem))


class Budget:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def bench_timeout(budget: Budget, stem: str, later: int) -> float:
    """Seconds a benchmark may take: twice its :data:`EXPECTED_S` figure or its even share of the budget
    left, whichever is more, but never the last :data:`MIN_STEP_S` of each of the ``later`` benchmarks."""
    left = budget.left()
    wanted = max(2.0 * EXPECTED_S.get(stem, 30), left / (later + 1))
    return max(1.0, min(wanted, left - MIN_STEP_S * later))


def run_step(
    cmd: list[str],
    budget: Budget,
    *,
    share: int = 1,
    reserve: float = 0.0,
    timeout: float | None = None,
    env: dict | None = None,
) -> tuple[int | str, str, float]:
    """Run ``cmd`` from the project root: (rc or "timeout", output, seconds). Its timeout is the budget left
    less ``reserve`` (what later steps keep), divided by ``share`` (the steps still to run), so one slow step
    cannot starve the others."""
    start = time.monotonic()
    if timeout is None:
        timeout = max(1.0, (budget.left() - reserve) / share)
    print(f"\n$ {' '.join(cmd)}   (time left {timeout:.0f} s)", flush=True)
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
        rc: int | str = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        rc = "timeout"
    seconds = time.monotonic() - start
    print(output, end="" if output.endswith("\n") else "\n", flush=True)
    print(f"-> exit {rc} after {seconds:.1f} s", flush=True)
    return rc, output, seconds


def pytest_summary(output: str) -> str:
    """pytest's final summary line (``5 passed, 2 skipped in 3.1s``), or a note that there was none."""
    for line in reversed(output.splitlines()):
        match = re.fullmatch(r"=*\s*(.*? in [\d.]+s(?: \([\d:]+\))?)\s*=*", line.strip())
        if match and re.search(r"\b(passed|failed|skipped|error|errors|deselected|no tests ran)\b", line):
            return match.group(1)
    return "no pytest summary line (see the output)"


_OUTCOMES = {
    "passed": "passed",
    "failed": "failed",
    "skipped": "skipped",
    "error": "errors",
    "errors": "errors",
}


def summary_counts(summary: str) -> dict[str, int] | None:
    """``{passed, failed, skipped, errors}`` of a pytest summary line (``3 failed, 5 passed, 2 skipped in
    3.1s``; absent outcomes 0), or None when ``summary`` is not one."""
    pairs = re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", summary)
    if not pairs and not re.search(r"\bno tests ran\b|\bdeselected\b", summary):  # all deselected: zeros
        return None
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    for number, outcome in pairs:
        counts[_OUTCOMES[outcome]] += int(number)
    return counts


def progress_counts(output: str) -> dict[str, int]:
    """Outcomes counted from ``pytest -q``'s progress lines (``..F.s.E   [ 40%]``): a run stopped before its
    summary line still says what it finished."""
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    letters = {".": "passed", "F": "failed", "s": "skipped", "E": "errors"}
    for line in output.splitlines():
        match = re.fullmatch(r"([.FsExX]+)\s*(\[\s*\d+%\])?", line.strip())
        if match:
            for letter in match.group(1):
                if letter in letters:
                    counts[letters[letter]] += 1
    return counts


def junit_counts(path: Path) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    if not path.exists():
        return counts
    for case in ET.parse(path).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        if "failure" in kinds:
            counts["failed"] += 1
        elif "error" in kinds:
            counts["error"] += 1
        elif "skipped" in kinds:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


def failures(output: str, limit: int = 40) -> list[str]:
    lines = [line for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    return lines[:limit] + ([f"... and {len(lines) - limit} more"] if len(lines) > limit else [])


def suite_files(shard: tuple[int, int] | None) -> list[str]:
    """The suite's test files other than the graph and sync checks; with ``shard=(k, n)`` the k-th of n
    parts of about equal size (:func:`balanced`)."""
    files = sorted(
        str(path.relative_to(ROOT))
        for path in TESTS.glob("test_*.py")
        if str(path.relative_to(ROOT)) not in (GRAPH_TESTS, SYNC_TESTS)
    )
    if shard is None:
        return files
    k, n = shard
    return balanced(files, n)[k - 1]


def test_steps(args: argparse.Namespace, device: torch.device) -> list[tuple[str, list[str]]]:
    """The tests' steps: ``(name, pytest selection)`` each."""
    steps = []
    if args.shard is None or args.shard[0] == 1:
        steps += [("graph-replay check", [GRAPH_TESTS]), ("sync check", [SYNC_TESTS])]
    if args.quick and device.type == "cpu":
        steps.append(("codegen (CUDA through NVRTC)", [CODEGEN_TESTS]))
    else:
        # --jobs J (no --shard): the suite in J parts, run at once beside the graph and sync checks
        shards = [args.shard] if args.shard is not None or args.jobs <= 1 else None
        if shards is None:
            shards = [(k, args.jobs) for k in range(1, args.jobs + 1)]
        for shard in shards:
            rest = suite_files(shard)
            if (
                device.type == "cuda"
            ):  # the CPU halves are CI's; test_cuda_paths runs CUDA's algorithms on the CPU
                rest = [f for f in rest if f != CODEGEN_TESTS] + ["-k", "cuda and not test_cuda_paths"]
            elif args.quick:
                rest += ["-k", "cuda or codegen"]
            name = "test suite" + (
                " (CUDA-parametrised and CUDA-only tests)" if device.type == "cuda" else ""
            )
            if shard is not None:
                name += f", part {shard[0]} of {shard[1]}"
            steps.append((name, rest))
    return steps


def tests_section(args: argparse.Namespace, device: torch.device, budget: Budget, report) -> str:
    steps = test_steps(args, device)
    lines = ["## Tests" + ("" if args.shard is None else f" (part {args.shard[0]} of {args.shard[1]})"), ""]
    totals = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    suite = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "complete": True, "steps": []}
    args.suite = suite
    # the tests may take the budget left less --bench-reserve (the benchmarks' share), the last step all
    reserve = args.bench_reserve if args.only is None else 0.0
    xmls = [Path(args.scratch) / f"junit-{slug(name)}.xml" for name, _ in steps]
    cmds = [
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", f"--junitxml={xml}"),
            *selection,
            *args.pytest_args,
        ]
        for xml, (_, selection) in zip(xmls, steps, strict=True)
    ]
    together = None
    if args.jobs > 1 and budget.left() - reserve >= 20:  # every step at once: one deadline
        together = run_together(cmds, budget, reserve=reserve, logs=Path(args.scratch))
        lines += [
            f"All {len(steps)} steps at once (`--jobs {args.jobs}`: the suite in {args.jobs} parts).",
            "",
        ]
    for i, ((name, selection), xml, cmd) in enumerate(zip(steps, xmls, cmds, strict=True)):
        if together is None and budget.left() - reserve < 20:
            lines.append(f"- **{name}**: not run (out of time: --budget)")
            suite["complete"] = False
            continue
        if together is not None:
            rc, output, seconds = together[i]
        else:
            rc, output, seconds = run_step(cmd, budget, reserve=reserve)
        counts = junit_counts(xml)
        for key in totals:
            totals[key] += counts[key]
        summary = pytest_summary(output) if rc != "timeout" else f"timed out after {seconds:.0f} s"
        parsed = summary_counts(summary) if rc != "timeout" else None
        if parsed is None:  # no summary line: what the progress lines show, and the suite is incomplete
            parsed = progress_counts(output)
            suite["complete"] = False
        for key in ("passed", "failed", "skipped", "errors"):
            suite[key] += parsed[key]
        suite["steps"].append({"name": name, "summary": summary, "seconds": round(seconds, 1)})
        shown = (
            " ".join(["pytest", *selection]) if len(selection) <= 4 else f"pytest <{len(selection)} files>"
        )
        lines.append(f"- **{name}** (`{shown}`, {seconds:.0f} s): {summary}")
        for failure in failures(output):
            lines.append(f"    - {failure}")
        report([*lines, ""])
    lines.append("")
    lines.append(
        "Total: "
        + ", ".join(f"{n} {kind}" for kind, n in totals.items())
        + " (skipped tests are not passes: the skip reasons are in each step's output)"
    )
    return "\n".join(lines) + "\n"


def bench_section(
    args: argparse.Namespace,
    device: torch.device,
    budget: Budget,
    report,
    scripts: list[Path],
    *,
    title: str = "## Benchmarks",
    after: int = 0,
) -> str:
    """Run ``scripts``; ``after``: the steps that follow this section (each keeps its last 20 s)."""
    lines = [title, ""]
    for i, script in enumerate(scripts):
        cmd = [sys.executable, str(script.relative_to(ROOT)), "--device", str(device)]
        if args.quick or (device.type == "cuda" and script.stem in QUICK_ON_CUDA):
            cmd.append("--quick")
        elif device.type == "cuda":
            cmd += FULL_CUDA_ARGS.get(script.stem, [])
        shown = " ".join(["python", *cmd[1:]])
        figures = Path(args.scratch) / f"{script.stem}.json"
        if script.stem in JSON_FIGURES:
            cmd += ["--json", str(figures)]
        if budget.left() < 20:
            lines += [f"### `{shown}`", "", "not run (out of time: --budget)", ""]
            args.bench_status[script.stem] = "not run (out of time: --budget)"
            continue
        later = len(scripts) - i - 1 + after
        rc, output, seconds = run_step(cmd, budget, timeout=bench_timeout(budget, script.stem, later))
        if figures.exists():
            full_cuda = device.type == "cuda" and "--quick" not in cmd
            args.figures.update(with_aliases(json.loads(figures.read_text()), full_cuda=full_cuda))
            args.write_figures()
        args.bench_status[script.stem] = (
            f"ran {seconds:.0f} s, exit {rc}"
            + ("" if script.stem not in JSON_FIGURES or figures.exists() else ", no --json figures written")
            + (", --quick sizes (their keys name the sizes)" if "--quick" in cmd else "")
        )
        status = "" if rc == 0 else f" — **exit {rc}**"
        lines += [f"### `{shown}`", "", f"{seconds:.0f} s{status}", "", "```", output.rstrip(), "```", ""]
        report(lines)
    return "\n".join(lines) + "\n"


def with_aliases(figures: dict, *, full_cuda: bool) -> dict:
    """A benchmark's ``--json`` figures, plus (``full_cuda``: a full run on CUDA) each issue key of
    :data:`ALIASES` whose source key it wrote (a file that is not a flat dict gives no figures)."""
    if not isinstance(figures, dict):
        return {}
    out = dict(figures)
    for key, source in ALIASES.items() if full_cuda else ():
        if key not in out and out.get(source) is not None:
            out[key] = out[source]
    return out


def figures_section(figures: dict, status: dict[str, str]) -> str:
    """Issue 36's figures: each key's value from the results JSON, or why it is absent."""
    lines = ["## Figures (issues 36 and 49's keys; all figures in the .json beside this file)", ""]
    suite = figures.get("full_suite")
    if suite:
        done = "" if suite.get("complete") else " (incomplete: a step stopped or did not run)"
        lines.append(
            f"- `full_suite`: {suite['passed']} passed, {suite['failed']} failed, {suite['skipped']} skipped, "
            f"{suite['errors']} errors{done}"
        )
    else:
        lines.append("- `full_suite`: not measured (the tests did not run in this command)")
    for key, script in ISSUE_KEYS.items():
        value = figures.get(key)
        if value is not None:
            lines.append(f"- `{key}`: {value:g}")
        else:
            absent = not (BENCH_DIR / f"{script}.py").exists()
            why = (
                "no such script in benchmarks/ yet"
                if absent
                else status.get(script, "not run in this command")
            )
            lines.append(f"- `{key}`: not measured ({script}: {why})")
    return "\n".join(lines) + "\n"


def header(device: torch.device, args: argparse.Namespace) -> str:
    now = datetime.datetime.now().astimezone()
    name = device_name(device)
    cuda = f", CUDA {torch.version.cuda}" if device.type == "cuda" else ""
    names = ("torch", "warp-lang", "warpgeo", "torch-fps", "trimesh", "triton")
    versions = ", ".join(f"{n} {version(n)}" for n in names if version(n) is not None)
    mode = "quick" if args.quick else "full"
    return (
        f"# warpgeo GPU check, {now:%Y-%m-%d}: {name}\n\n"
        f"- device: {name}{cuda}\n"
        f"- host: {os.cpu_count()} CPU cores; Python {sys.version.split()[0]}\n"
        f"- versions: {versions}\n"
        f"- command: `python benchmarks/gpu_check.py {' '.join(args.argv)}` ({mode} mode), {now:%Y-%m-%d %H:%M %Z}\n"
        f"- commit: {git_commit()}\n"
    )


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git here)"


def read_sections(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    return {m.group(1): m.group(2) for m in _SECTION.finditer(path.read_text())}


def write_sections(path: Path, sections: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    order = sorted(
        sections,
        key=lambda key: (key != "header", key != "figures", key != "host", key.startswith("bench"), key),
    )
    parts = [f"<!-- gpu_check:{key} -->\n{sections[key]}<!-- /gpu_check:{key} -->\n" for key in order]
    path.write_text("\n".join(parts))


def default_out(device: torch.device) -> Path:
    today = datetime.date.today().isoformat()
    name = slug(device_name(device)) if device.type == "cuda" else "cpu-check"
    return BENCH_DIR / "results" / f"{today}-{name}.md"


def dry_run(args: argparse.Namespace, device: torch.device) -> None:
    """What a run with these arguments would do, in order, and where each issue key comes from."""
    scripts = benchmarks()
    print(f"plan on {device} within --budget {args.budget:.0f} s (nothing is run):")
    if args.only is None:
        print(f"  bench_host first, up to {2 * EXPECTED_S['bench_host']} s")
    if args.only in (None, "tests"):
        steps = test_steps(args, device)
        reserve = args.bench_reserve if args.only is None else 0.0
        how = f"all {len(steps)} at once" if args.jobs > 1 else "one after another"
        print(f"  tests, {how}, within the budget less {reserve:.0f} s (--bench-reserve):")
        for name, selection in steps:
            print(f"    {name}: pytest {' '.join([*selection, *args.pytest_args])}")
    if args.only in (None, "bench"):
        print(
            "  benchmarks, in this order (each up to twice its expected time, or its share of what is left):"
        )
        for script in scripts:
            if args.only is None and script.stem == "bench_host":
                continue
            extra = (
                ["--quick"]
                if args.quick or (device.type == "cuda" and script.stem in QUICK_ON_CUDA)
                else FULL_CUDA_ARGS.get(script.stem, [])
                if device.type == "cuda"
                else []
            )
            json_note = " --json" if script.stem in JSON_FIGURES else ""
            print(
                f"    {script.stem} {' '.join(extra)}{json_note}   (expected {EXPECTED_S.get(script.stem, 30)} s)"
            )
    print("  issue keys: the benchmark that writes each (and the key it writes, where another):")
    for key, script in ISSUE_KEYS.items():
        where = (
            "" if (BENCH_DIR / f"{script}.py").exists() else "  [no such script yet: absent, not an error]"
        )
        source = f" as {ALIASES[key]}" if key in ALIASES else ""
        print(f"    {key}: {script}{source}{where}")


def _shard(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d+)/(\d+)", text)
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise argparse.ArgumentTypeError(f"expected K/N with 1 <= K <= N, e.g. 1/2; got {text!r}")
    return int(match.group(1)), int(match.group(2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument(
        "--quick", action="store_true", help="small benchmark sizes, CUDA-parametrised tests only"
    )
    parser.add_argument("--only", choices=["tests", "bench"], help="run one half (each fits in one command)")
    parser.add_argument("--out", type=Path, help="results file (default benchmarks/results/<date>-<gpu>.md)")
    parser.add_argument(
        "--budget", type=float, default=540.0, help="seconds this command may take (default 540)"
    )
    parser.add_argument(
        "--shard",
        type=_shard,
        metavar="K/N",
        help="with --only tests: the K-th of N parts of the suite (1/2, 2/2)",
    )
    parser.add_argument(
        "--merge", type=Path, nargs="+", help="combine results files from --only runs into --out"
    )
    parser.add_argument("--scratch", default=None, help="where pytest's junit files go (default: a temp dir)")
    parser.add_argument(
        "--bench-reserve",
        type=float,
        default=330.0,
        help="seconds of --budget the tests leave to the benchmarks in a whole run (default 330)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="run the tests' steps at once, the suite in this many parts (default 4 on CUDA, 1 on the CPU)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the steps (commands, time limits) and run nothing"
    )
    parser.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments (e.g. -x, -k expr)")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv
    if args.jobs is None:
        args.jobs = 4 if torch.device(args.device).type == "cuda" and args.shard is None else 1
    if args.dry_run:
        dry_run(args, torch.device(args.device))
        return 0

    if args.merge:
        sections: dict[str, str] = {}
        for path in args.merge:
            sections.update(read_sections(path))
        if args.out is None:
            parser.error("--merge needs --out (e.g. benchmarks/results/<date>-<gpu>.md)")
        out = args.out
        write_sections(out, sections)
        print(f"merged {len(args.merge)} files into {out}")
        return 0

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("--device cuda, but torch sees no CUDA device here (use --device cpu to try the flow)")
        return 2
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    print(f"device: {device_name(device)}", flush=True)
    budget = Budget(args.budget)
    if args.scratch is None:
        import tempfile

        args.scratch = tempfile.mkdtemp(prefix="gpu_check-")
    Path(args.scratch).mkdir(parents=True, exist_ok=True)
    out = args.out or default_out(device)
    sections = read_sections(out)
    sections["header"] = header(device, args)

    def report(partial_lines: list[str], key: str) -> None:
        sections[key] = "\n".join(partial_lines) + "\n\n(incomplete: the command stopped here)\n"
        write_sections(out, sections)

    write_sections(out, sections)
    # the results JSON beside the .md: what an earlier --only run wrote there is kept, this run's figures
    # replace it key by key; rewritten after each step (a command stopped at its limit leaves what it did)
    figures_out = out.with_suffix(".json")
    args.figures = json.loads(figures_out.read_text()) if figures_out.exists() else {}
    args.figures.update(
        {
            "device": device_name(device),
            "commit": git_commit(),
            "mode": "quick" if args.quick else "full",
            "date": datetime.date.today().isoformat(),
            "versions": {n: version(n) for n in ("torch", "warp-lang", "warpgeo", "torch-fps", "triton")},
        }
    )

    def write_figures() -> None:
        figures_out.write_text(json.dumps(args.figures, indent=1) + "\n")

    args.write_figures = write_figures
    write_figures()
    args.bench_status = {}
    scripts = benchmarks()
    if args.only is None:  # issue 36: bench_host first, the host-cost diagnosis, before the tests warm up
        host = [p for p in scripts if p.stem == "bench_host"]
        scripts = [p for p in scripts if p.stem != "bench_host"]
        sections["host"] = bench_section(
            args,
            device,
            budget,
            lambda lines: report(lines, "host"),
            host,
            title="## Host cost (bench_host, first)",
            after=len(scripts) + 2,
        )
        write_sections(out, sections)
    if args.only in (None, "tests"):
        key = "tests" if args.shard is None else f"tests{args.shard[0]}of{args.shard[1]}"
        sections[key] = tests_section(args, device, budget, lambda lines: report(lines, key))
        args.figures["full_suite" if args.shard is None else f"full_suite_{key[5:]}"] = args.suite
        write_figures()
        write_sections(out, sections)
    if args.only in (None, "bench"):
        sections["bench"] = bench_section(args, device, budget, lambda lines: report(lines, "bench"), scripts)
        write_figures()
        sections["figures"] = figures_section(args.figures, args.bench_status)
        write_sections(out, sections)
    print(f"figures: {figures_out}")
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
