"""gpu.device: the one device rule on CUDA_VISIBLE_DEVICES values, and NVML always shut down.

NVML is the `FakePynvml` test double (tests/gpu/fakes.py) put where gpu.device imports pynvml.
"""

from __future__ import annotations

import sys

import pytest

import gpu
from gpu import DeviceChoice, DeviceSelectionError, GpuReadError, choose_device, open_gpu, visible_gpu
from tests.gpu.fakes import FakeGpu, FakePynvml, install, two_h200s

UUID_A = "GPU-aaaa1111-0000-0000-0000-000000000000"
UUID_B = "GPU-bbbb2222-0000-0000-0000-000000000000"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)


@pytest.fixture
def nvml(monkeypatch) -> FakePynvml:
    return install(monkeypatch, FakePynvml(two_h200s()))


def _uuid_of(env: dict[str, str]) -> str | None:
    with visible_gpu(env) as g:
        return None if g is None else g.uuid()


# --- the rule, before NVML is asked -------------------------------------------------------------

@pytest.mark.parametrize(("value", "ordinal", "index", "uuid"), [
    (None, 0, 0, None),            # unset: device 0
    (None, 1, 1, None),            # unset: ordinal k is NVML index k
    ("1", 0, 1, None),
    ("1,0", 0, 1, None),           # the first entry, not the lowest index
    ("1,0", 1, 0, None),
    (" 1 , 0", 0, 1, None),        # spaces around entries are read past
    ("GPU-bbbb", 0, None, "GPU-bbbb"),
    ("0,abc", 0, 0, None),         # entries past the one asked for are not read
])
def test_the_rule_picks_the_entry_at_the_ordinal(value, ordinal, index, uuid):
    env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    choice = choose_device(env, ordinal=ordinal)
    assert isinstance(choice, DeviceChoice)
    assert (choice.nvml_index, choice.uuid_prefix) == (index, uuid)


@pytest.mark.parametrize("value", ["", "-1", " ", "-1,0"])
def test_an_empty_or_negative_first_entry_hides_every_gpu(value):
    assert choose_device({"CUDA_VISIBLE_DEVICES": value}) is None


@pytest.mark.parametrize("value", ["abc", "cuda:0", "MIG-1234", "0x1", "1.0"])
def test_garbage_is_refused_not_read_as_no_gpu(value):
    with pytest.raises(DeviceSelectionError, match="neither a device index nor a GPU"):
        choose_device({"CUDA_VISIBLE_DEVICES": value})


def test_an_ordinal_past_the_visible_list_is_refused():
    with pytest.raises(DeviceSelectionError, match="ordinal 1"):
        choose_device({"CUDA_VISIBLE_DEVICES": "0,-1,1"}, ordinal=1)  # CUDA stops reading at -1
    with pytest.raises(DeviceSelectionError):
        choose_device({}, ordinal=-1)


def test_the_default_environment_is_this_processs(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert choose_device().nvml_index == 1


# --- the rule, mapped to NVML devices ---------------------------------------------------------------

@pytest.mark.parametrize(("value", "uuid"), [
    (None, UUID_A),
    ("1", UUID_B),
    ("1,0", UUID_B),
    ("0,1", UUID_A),
    (UUID_B, UUID_B),
    ("GPU-bbbb", UUID_B),          # a unique prefix, as CUDA accepts
])
def test_open_gpu_opens_the_device_the_rule_names(nvml, value, uuid):
    assert _uuid_of({} if value is None else {"CUDA_VISIBLE_DEVICES": value}) == uuid
    assert nvml.inits == nvml.shutdowns == 1


@pytest.mark.parametrize("value", ["", "-1"])
def test_hidden_gpus_open_nothing_and_never_touch_nvml(nvml, value):
    assert open_gpu({"CUDA_VISIBLE_DEVICES": value}) is None
    assert nvml.inits == 0


@pytest.mark.parametrize(("value", "message"), [
    ("7", "GPU index 7, but NVML sees 2"),
    ("GPU-cccc", "no GPU here with a UUID starting 'GPU-cccc'"),
    ("GPU-", "2 GPUs here with a UUID starting"),
    ("garbage", "neither a device index"),
])
def test_a_value_naming_no_gpu_here_raises_and_nvml_is_shut_down(nvml, value, message):
    with pytest.raises(DeviceSelectionError, match=message):
        open_gpu({"CUDA_VISIBLE_DEVICES": value})
    assert nvml.initialised == 0


def test_an_index_on_mixed_models_is_ambiguous_unless_the_order_is_pci(nvml):
    nvml.gpus[1].name = "NVIDIA GeForce RTX 3090 (fake)"
    with pytest.raises(DeviceSelectionError, match="CUDA_DEVICE_ORDER=PCI_BUS_ID"):
        open_gpu({"CUDA_VISIBLE_DEVICES": "1"})
    assert _uuid_of({"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) == UUID_B
    assert _uuid_of({"CUDA_VISIBLE_DEVICES": UUID_B}) == UUID_B  # a UUID is never ambiguous
    assert nvml.initialised == 0


def test_nvml_failing_while_opening_is_none_and_shut_down(nvml):
    nvml.gpus[1].fail_reads = True
    assert open_gpu() is None
    assert nvml.inits == nvml.shutdowns == 1


def test_no_driver_or_no_package_is_none_not_an_error(monkeypatch):
    install(monkeypatch, FakePynvml(two_h200s(), driver=False))
    assert open_gpu() is None
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert open_gpu() is None


def test_a_machine_without_gpus_is_refused_by_index(monkeypatch):
    nvml = install(monkeypatch, FakePynvml([]))
    with pytest.raises(DeviceSelectionError, match="NVML sees 0"):
        open_gpu()
    assert nvml.initialised == 0


# --- init and shutdown in pairs -----------------------------------------------------------------

def test_visible_gpu_shuts_nvml_down_when_the_block_raises(nvml):
    with pytest.raises(RuntimeError), visible_gpu() as g:
        assert nvml.initialised == 1
        g.memory_used_bytes()
        raise RuntimeError("the caller's own failure")
    assert nvml.inits == nvml.shutdowns == 1


def test_a_failed_read_is_a_gpu_read_error_and_nvml_is_still_shut_down(nvml):
    with pytest.raises(GpuReadError, match="GPU is lost") as caught, visible_gpu() as g:
        nvml.gpus[0].fail_reads = True  # lost after it was opened
        g.memory_total_bytes()
    assert isinstance(caught.value.__cause__, nvml.NVMLError)
    assert nvml.inits == nvml.shutdowns == 1


def test_close_shuts_down_once_and_a_closed_gpu_is_not_read(nvml):
    g = open_gpu()
    g.close()
    g.close()
    assert nvml.shutdowns == 1
    with pytest.raises(GpuReadError, match="after close"):
        g.memory_used_bytes()


def test_overlapping_readers_do_not_shut_each_other_down(nvml):
    monitor = open_gpu({"CUDA_VISIBLE_DEVICES": "1"})
    with visible_gpu({"CUDA_VISIBLE_DEVICES": "1"}) as g:
        g.compute_pids()
    assert monitor.memory_used_bytes() == 60 * 1024**3  # NVML still initialised for the first reader
    monitor.close()
    assert nvml.initialised == 0


# --- the reads ------------------------------------------------------------------------------------

def test_the_reads_come_from_the_chosen_device(nvml):
    with visible_gpu({"CUDA_VISIBLE_DEVICES": "1"}) as g:
        info, sample, pids = g.info(), g.sample(), g.compute_pids()
    assert (info.nvml_index, info.uuid, info.name, info.driver_version) == (1, UUID_B, "NVIDIA H200 (fake)", "570.00")
    assert (info.memory_total_bytes, info.power_limit_w, info.max_sm_clock_mhz) == (140 * 1024**3, 700.0, 1980)
    assert (sample.sm_clock_mhz, sample.mem_clock_mhz, sample.power_w, sample.temperature_c) == (1980, 3201, 450.0, 45)
    assert (sample.utilization_pct, sample.memory_used_bytes, sample.throttle_mask) == (80, 60 * 1024**3, 0)
    assert sample.compute_processes == 1 and pids == frozenset({4242})
    assert set(nvml.gpus[0].calls) == {"name"}  # GPU 0 is only named (the mixed-models check), never read


def test_a_reading_the_board_lacks_is_none(monkeypatch):
    install(monkeypatch, FakePynvml([FakeGpu(power_mw=None)]))
    with visible_gpu() as g:
        assert g.sample().power_w is None


def test_the_package_exports_what_it_lists():
    assert sorted(gpu.__all__) == sorted(n for n in dir(gpu) if not n.startswith("_") and n not in
                                         {"device", "errors", "annotations"})
