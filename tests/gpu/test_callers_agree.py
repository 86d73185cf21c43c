"""The three NVML readers pick the same GPU: bench's telemetry, serving's memory watch, the VRAM budget.

As in a two-GPU study where each worker gets CUDA_VISIBLE_DEVICES=N: its budget, its telemetry and
the memory it waits on must all come from its own GPU. NVML is the `FakePynvml` test double.
"""

from __future__ import annotations

import pytest

from bench.errors import BenchConfigError
from bench.telemetry import GpuMonitor
from search_space.budget import gpu_memory_bytes
from search_space.errors import BudgetError
from serving import gpu_memory
from serving.errors import ConfigError
from tests.gpu.fakes import FakePynvml, install, two_h200s


@pytest.fixture
def nvml(monkeypatch) -> FakePynvml:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    return install(monkeypatch, FakePynvml(two_h200s()))


def _what_each_caller_sees() -> tuple[int | None, str | None, str | None]:
    budget = gpu_memory_bytes()
    monitor = GpuMonitor.open(0)
    telemetry = None
    if monitor is not None:
        telemetry = monitor.identity.uuid
        monitor.close()
    snap = gpu_memory.snapshot()
    return budget, telemetry, None if snap is None else snap.gpu_uuid


@pytest.mark.parametrize(("value", "device"), [
    (None, 0),
    ("0", 0),
    ("1", 1),
    ("1,0", 1),
    ("GPU-bbbb2222", 1),
    ("GPU-aaaa1111-0000-0000-0000-000000000000", 0),
])
def test_budget_telemetry_and_memory_watch_read_the_same_gpu(nvml, monkeypatch, value, device):
    if value is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    chosen = nvml.gpus[device]
    assert _what_each_caller_sees() == (chosen.memory_total_bytes, chosen.uuid, chosen.uuid)
    assert nvml.inits == nvml.shutdowns == 3  # each caller shut NVML down again


@pytest.mark.parametrize("value", ["", "-1"])
def test_hidden_gpus_give_every_caller_no_gpu(nvml, monkeypatch, value):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert _what_each_caller_sees() == (None, None, None)
    assert nvml.inits == 0


@pytest.mark.parametrize("value", ["abc", "5"])
def test_an_invalid_value_is_each_callers_own_error(nvml, monkeypatch, value):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    with pytest.raises(BudgetError, match="CUDA_VISIBLE_DEVICES"):
        gpu_memory_bytes()
    with pytest.raises(BenchConfigError, match="CUDA_VISIBLE_DEVICES"):
        GpuMonitor.open(0)
    with pytest.raises(ConfigError, match="CUDA_VISIBLE_DEVICES"):
        gpu_memory.snapshot()
    assert nvml.initialised == 0


def test_the_memory_watch_waits_only_on_its_own_gpu(nvml):
    """pid 4242 holds memory on GPU 1 only: a server on GPU 0 is released, one on GPU 1 is not."""
    on_0 = gpu_memory.snapshot({"CUDA_VISIBLE_DEVICES": "0"})
    gpu_memory.wait_released(on_0, pid=4242, timeout_s=0)
    on_1 = gpu_memory.snapshot({"CUDA_VISIBLE_DEVICES": "1"})
    with pytest.raises(gpu_memory.GpuMemoryNotReleased, match="GPU-bbbb2222"):
        gpu_memory.wait_released(on_1, pid=4242, timeout_s=0)
    assert nvml.initialised == 0


def test_the_memory_watch_follows_the_servers_environment_not_this_processs(nvml, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert gpu_memory.snapshot({"CUDA_VISIBLE_DEVICES": "1"}).gpu_uuid == nvml.gpus[1].uuid


GiB = 1024**3


def _one_gpu_two_workers(nvml, *, per_process: bool):
    """Worker B's server (pid 100, 10 GiB) is on the GPU when worker A launches its server (pid 200)."""
    gpu = nvml.gpus[0]
    gpu.pids, gpu.memory_used_bytes = (100,), 11 * GiB
    gpu.pid_memory = {100: 10 * GiB} if per_process else {}
    baseline = gpu_memory.snapshot({"CUDA_VISIBLE_DEVICES": "0"})
    gpu.pids, gpu.memory_used_bytes = (100, 200), 31 * GiB  # A's server loads 20 GiB
    gpu.pid_memory = {100: 10 * GiB, 200: 20 * GiB} if per_process else {}
    return gpu, baseline


@pytest.mark.parametrize("per_process", [True, False])
def test_a_server_sharing_its_gpu_with_another_workers_is_released_when_its_own_memory_is(nvml, per_process):
    gpu, baseline = _one_gpu_two_workers(nvml, per_process=per_process)
    # A's server stops while B's grows by 5 GiB: the GPU is fuller than at A's launch, yet A's memory is free
    gpu.pids, gpu.memory_used_bytes = (100,), 16 * GiB
    gpu.pid_memory = {100: 15 * GiB} if per_process else {}
    gpu_memory.wait_released(baseline, pid=200, timeout_s=0)
    assert nvml.initialised == 0


def test_memory_no_live_process_holds_is_still_the_stopped_servers(nvml):
    gpu, baseline = _one_gpu_two_workers(nvml, per_process=True)
    gpu.pids, gpu.memory_used_bytes, gpu.pid_memory = (100,), 30 * GiB, {100: 10 * GiB}  # A's 20 GiB not freed
    with pytest.raises(gpu_memory.GpuMemoryNotReleased, match="pid 200"):
        gpu_memory.wait_released(baseline, pid=200, timeout_s=0)


def test_alone_on_its_gpu_a_server_is_released_only_when_usage_is_back(nvml):
    gpu = nvml.gpus[0]
    gpu.pids, gpu.memory_used_bytes = (), 1 * GiB
    baseline = gpu_memory.snapshot({"CUDA_VISIBLE_DEVICES": "0"})
    gpu.memory_used_bytes = 21 * GiB  # the process left, the driver has not freed its memory yet
    with pytest.raises(gpu_memory.GpuMemoryNotReleased):
        gpu_memory.wait_released(baseline, pid=200, timeout_s=0)
    gpu.memory_used_bytes = 1 * GiB
    gpu_memory.wait_released(baseline, pid=200, timeout_s=0)
