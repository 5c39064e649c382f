"""Device selection, timing, kernel counting and peak memory, as far as a CPU can check them."""

import pytest
import torch
from optimus_egg.bench.device import Device, count_kernels, peak_of, pick

CUDA, CPU = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU


def test_pick():
    assert pick("cpu") == Device("cpu")
    assert pick("auto") == Device("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="auto, cpu, cuda"):
        pick("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_an_error():
    with pytest.raises(RuntimeError, match="no CUDA device"):
        pick("cuda")


def test_count_kernels_splits_triton_from_extern_and_skips_copies_and_host_events():
    events = [("triton_poi_fused_relu_0", CUDA), ("triton_red_fused_sum_1", CUDA),
              ("ampere_sgemm_64x32_nn", CUDA), ("Memcpy HtoD (Pageable -> Device)", CUDA),
              ("Memset (Device)", CUDA), ("[memory]", CUDA), ("aten::mm", CPU), ("triton_poi_x", CPU)]
    assert count_kernels(events) == {"triton": 2, "extern": 1, "total": 3}
    assert count_kernels([]) == {"triton": 0, "extern": 0, "total": 0}


def test_peak_of_follows_time_order():
    # (time, bytes): +4 at t=1, +8 at t=3, -4 at t=2 → live 4, 0, 8: peak 8 (not 12)
    assert peak_of([(3, 8), (1, 4), (2, -4)]) == 8
    assert peak_of([]) == 0


def test_cpu_seconds_calls_fn_and_times_it():
    calls = []
    seconds = Device("cpu").seconds(lambda: calls.append(1), calls=3)
    assert len(calls) == 3 and seconds >= 0


def test_cpu_peak_bytes_sees_an_allocation_and_no_profiled_launches():
    cpu = Device("cpu")
    x = torch.randn(256, 1024)  # 1 MiB
    assert cpu.peak_bytes(lambda: x * 2) >= x.numel() * 4
    assert cpu.kernel_launches(lambda: x * 2) is None
