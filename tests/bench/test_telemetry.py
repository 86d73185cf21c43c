"""bench.telemetry: throttle reasons and window summaries on recorded NVML samples; no GPU is no error."""

from __future__ import annotations

import pytest

from bench.telemetry import GpuMonitor, GpuSample, decode_throttle_reasons, summarize_window


def _sample(sm: int, power: float, temp: int, mask: int = 0) -> GpuSample:
    return GpuSample(
        sm_clock_mhz=sm,
        mem_clock_mhz=9751,
        power_w=power,
        temperature_c=temp,
        utilization_pct=98,
        memory_used_bytes=16 * 2**30,
        throttle_mask=mask,
    )


def test_benign_reasons_are_dropped_and_slowdowns_named():
    assert decode_throttle_reasons(0x1 | 0x2) == ()
    assert decode_throttle_reasons(0x4 | 0x20) == ("sw_power_cap", "sw_thermal_slowdown")
    assert decode_throttle_reasons(0x1000) == ("unknown_0x1000",)


def test_window_folds_samples_into_extremes_and_a_union_of_reasons():
    # shape of an RTX 3090 decode: boost clock, then the power cap bites
    window = summarize_window(
        [_sample(1950, 330.0, 66), _sample(1905, 350.0, 70, mask=0x4), _sample(1890, 349.0, 71)]
    )
    assert (window.sm_clock_mhz_min, window.sm_clock_mhz_max) == (1890, 1950)
    assert window.power_w_max == 350.0
    assert window.power_w_mean == pytest.approx(343.0)
    assert window.temperature_c_max == 71
    assert window.throttle_reasons == ("sw_power_cap",)
    assert window.is_throttled


def test_an_empty_window_is_none():
    assert summarize_window([]) is None


def test_no_gpu_index_means_no_monitor():
    assert GpuMonitor.open(None) is None


def test_a_machine_without_nvml_gets_none_not_an_error():
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        assert GpuMonitor.open(0) is None
    else:
        pynvml.nvmlShutdown()
        monitor = GpuMonitor.open(0)
        assert monitor is not None and monitor.identity.name
        with monitor.window() as window:
            pass
        assert window.result is not None and window.result.samples >= 2
        monitor.close()
