"""The host path of a call: one current-stream lookup per call, the stream handed to every launch, launcher
constants (``_launch.constant``) taken by identity yet never mistaken for another tensor.

On a slow host torch's current-stream lookup costs 10-20 µs (the H200 run of 2026-11-26,
``benchmarks/results/2026-11-26-nvidia-h200-2.md``): kNN, ball query and chamfer look it up once per call
and pass it down (``stream=``). On the CPU the lookup returns None; the tests here check that every launch of
these ops receives the one the call looked up (a stand-in object), and on CUDA that torch is asked once.
"""

from __future__ import annotations

import pytest
import torch
from reference import knn_reference

import warpgeo
from warpgeo import _grid, _launch, _warp

# (name, call) of every op that looks the stream up once: the scan (N <= 256) and the grid, L2 and L1
_CASES = {
    "knn scan": lambda q, p: warpgeo.knn(q, p[:, :200], 4),
    "knn grid": lambda q, p: warpgeo.knn(q, p, 4),
    "knn float64 scan": lambda q, p: warpgeo.knn(q.double(), p[:, :200].double(), 4),
    "ball_query scan": lambda q, p: warpgeo.ball_query(q, p[:, :200], 0.3, 8),
    "ball_query grid": lambda q, p: warpgeo.ball_query(q, p, 0.3, 8),
    "ball_query float64 scan": lambda q, p: warpgeo.ball_query(q.double(), p[:, :200].double(), 0.3, 8),
    "chamfer scan": lambda q, p: warpgeo.chamfer_distance(q, p[:, :200]),
    "chamfer grid": lambda q, p: warpgeo.chamfer_distance(q, p),
    "chamfer float64 scan": lambda q, p: warpgeo.chamfer_distance(q.double(), p[:, :200].double()),
    "chamfer L1": lambda q, p: warpgeo.chamfer_distance(q, p, norm=1),
}


def _clouds(device):
    g = torch.Generator().manual_seed(0)
    return torch.rand(2, 50, 3, generator=g).to(device), torch.rand(2, 600, 3, generator=g).to(device)


@pytest.mark.parametrize("cuda_path", [False, True], ids=["cpu-path", "cuda-path"])
@pytest.mark.parametrize("case", list(_CASES))
def test_every_launch_takes_the_stream_its_call_looked_up(monkeypatch, case, cuda_path):
    """A stand-in for Warp's stream: looked up once per call, and every launch of the call receives it."""
    queries, points = _clouds(torch.device("cpu"))
    fn = _CASES[case]
    lookups = []
    stand_in = object()

    def looked_up(device):
        lookups.append(device)
        return stand_in

    seen = []
    real_run = _launch.run

    def watched(kernel, dims, device, block_dim, args):
        seen.append((kernel.key, args.get(_launch.STREAM)))
        return real_run(kernel, dims, device, block_dim, args)

    previous = _warp.PATHS.cuda_on_cpu
    _warp.PATHS.cuda_on_cpu = cuda_path
    try:
        with warpgeo.value_checks(False):
            fn(queries, points)  # warm-up: first launches
            monkeypatch.setattr(_warp, "warp_stream", looked_up)
            monkeypatch.setattr(_launch, "run", watched)
            fn(queries, points)
    finally:
        _warp.PATHS.cuda_on_cpu = previous
    assert len(lookups) == 1, lookups
    assert seen and all(stream is stand_in for _, stream in seen), seen


def test_warp_stream_is_none_on_the_cpu():
    """On the CPU the stream is None: no torch CUDA call (this machine may have none)."""
    assert _warp.warp_stream(torch.device("cpu")) is None
    assert _warp.warp_stream("cpu") is None


@pytest.mark.parametrize("case", list(_CASES))
def test_cuda_asks_torch_for_the_current_stream_once_per_call(monkeypatch, case):
    queries, points = _clouds(torch.device("cuda"))
    fn = _CASES[case]
    calls = []
    real = torch.cuda.current_stream

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    with warpgeo.value_checks(False):
        fn(queries, points)
        monkeypatch.setattr(torch.cuda, "current_stream", counted)
        fn(queries, points)
    assert len(calls) == 1, calls


def test_cuda_launches_go_to_a_side_stream_made_current():
    """The stream looked up once is the current one: work on a side stream lands there (and the default
    stream, busy with nothing, does not see it before a sync)."""
    queries, points = _clouds(torch.device("cuda"))
    expected = warpgeo.knn(queries, points, 4)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), warpgeo.value_checks(False):
        got = warpgeo.knn(queries, points, 4)
        loss = warpgeo.chamfer_distance(queries, points).loss
    side.synchronize()
    assert torch.equal(got.idx, expected.idx)
    assert torch.equal(loss, warpgeo.chamfer_distance(queries, points).loss)


def test_placeholders_are_launcher_constants():
    cpu = torch.device("cpu")
    for t in (
        _grid.lengths_arg(None, cpu),
        _grid.no_params(cpu),
        *_grid.no_grid(cpu, torch.float32)[1].values(),
    ):
        assert _launch._CONSTANTS.get(id(t)) is t
    assert _grid.lengths_arg(torch.tensor([3, 4]), cpu).data_ptr() != 0  # a caller's tensor is not one


@pytest.mark.parametrize("cuda_path", [False, True], ids=["cpu-path", "cuda-path"])
def test_a_constant_and_a_caller_tensor_alternate_in_one_parameter(cuda_path):
    """The lengths placeholder (a constant, taken by identity) and a caller's lengths tensor take turns in
    the same launch parameter: each call gets its own, against brute force."""
    g = torch.Generator().manual_seed(1)
    queries, points = torch.rand(2, 30, 3, generator=g), torch.rand(2, 100, 3, generator=g)
    lengths = torch.tensor([40, 100])
    previous = _warp.PATHS.cuda_on_cpu
    _warp.PATHS.cuda_on_cpu = cuda_path
    try:
        for with_lengths in (False, True, False, True):
            got = warpgeo.knn(queries, points, 3, point_lengths=lengths if with_lengths else None)
            for b in range(2):
                n = int(lengths[b]) if with_lengths else 100
                want_d, want_i = knn_reference(queries[b], points[b, :n], 3)
                assert torch.equal(got.idx[b], torch.as_tensor(want_i))
                torch.testing.assert_close(got.dists[b], torch.as_tensor(want_d, dtype=torch.float32))
    finally:
        _warp.PATHS.cuda_on_cpu = previous
