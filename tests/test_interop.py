"""The torch <-> Warp layer: devices, streams, dtypes, zero-copy wrapping, the launch helper."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from warpgeo import _interop

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")
needs_two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="fewer than 2 CUDA devices")


def test_import_does_no_work():
    code = "import sys, warpgeo; warpgeo.__all__; print('warp' in sys.modules, 'warpgeo.fps' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_public_names_resolve():
    import warpgeo

    assert callable(warpgeo.farthest_point_sampling)
    assert issubclass(warpgeo.FarthestPointSampling, torch.autograd.Function)
    with pytest.raises(AttributeError, match="no_such_name"):
        warpgeo.no_such_name  # noqa: B018


# devices and streams -----------------------------------------------------------------------------------


def test_cpu_device():
    assert str(_interop.warp_device(torch.device("cpu"))) == "cpu"
    assert _interop.warp_stream(torch.device("cpu")) is None


@pytest.mark.parametrize("device", ["meta", "mps"])
def test_unsupported_device_raises(device):
    with pytest.raises(ValueError, match=device):
        _interop.warp_device(torch.device(device))


@needs_cuda
def test_cuda_device_and_current_stream():
    assert str(_interop.warp_device(torch.device("cuda:0"))) == "cuda:0"
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        stream = _interop.warp_stream(torch.device("cuda:0"))
        assert stream.cuda_stream == side.cuda_stream


@needs_two_gpus
def test_cuda_index_is_kept():
    assert str(_interop.warp_device(torch.device("cuda:1"))) == "cuda:1"
    with torch.cuda.device(1):
        assert str(_interop.warp_device(torch.device("cuda"))) == "cuda:1"


# dtypes ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "compute"),
    [
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.float32),
        (torch.float64, torch.float64),
    ],
)
def test_dtype_table(dtype, compute):
    t = torch.zeros(2, 3, dtype=dtype)
    _interop.check_float(t, "x")
    assert _interop.compute_dtype(dtype) == compute
    assert _interop.to_compute(t).dtype == compute


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.complex64, torch.uint8])
def test_unsupported_float_dtype_raises(dtype):
    with pytest.raises(TypeError, match=r"spheres must have dtype .*got torch\."):
        _interop.check_float(torch.zeros(2, dtype=dtype), "spheres")


def test_index_dtypes():
    _interop.check_index(torch.zeros(2, dtype=torch.int32), "idx")
    _interop.check_index(torch.zeros(2, dtype=torch.int64), "idx")
    with pytest.raises(TypeError, match="idx"):
        _interop.check_index(torch.zeros(2, dtype=torch.float32), "idx")
    with pytest.raises(TypeError, match=r"idx must be a torch\.Tensor"):
        _interop.check_index([1, 2], "idx")


def test_same_device_check():
    a = torch.zeros(2)
    assert _interop.check_same_device("a", {"a": a, "b": torch.zeros(1), "c": None}) == a.device
    with pytest.raises(ValueError, match="b must be on the same device as a"):
        _interop.check_same_device("a", {"a": a, "b": torch.zeros(1, device="meta")})


# zero-copy wrapping ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("dtype", "vec"), [(torch.float32, "vec3f"), (torch.float64, "vec3d")])
def test_vec3_view_is_zero_copy(dtype, vec):
    wp = _interop.warp()
    t = torch.arange(24, dtype=dtype).reshape(2, 4, 3)
    arr = _interop.as_warp(t, getattr(wp, vec))
    assert arr.shape == (2, 4)
    assert arr.ptr == t.data_ptr()
    t[1, 2, 0] = 100.0  # a write through torch is seen by Warp: same memory
    assert arr.numpy()[1, 2][0] == 100.0


def test_non_contiguous_tensor_is_refused():
    t = torch.zeros(4, 3).t()
    with pytest.raises(ValueError, match="contiguous"):
        _interop.as_warp(t)
    assert _interop.to_compute(t).is_contiguous()


# the launch helper --------------------------------------------------------------------------------------


def test_launch_checks_argument_count_and_skips_empty_grids():
    from warpgeo._kernels import fps as kernels

    with pytest.raises(TypeError, match="takes 7 arguments"):
        _interop.launch(kernels.FPS_BLOCK["float32"], [1], [torch.zeros(1)], device=torch.device("cpu"))
    # an empty grid launches nothing, whatever the arguments
    _interop.launch(kernels.FPS_BLOCK["float32"], [0], [None] * 7, device=torch.device("cpu"))
