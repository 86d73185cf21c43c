"""The launcher against real server processes: start, stop, restart, and each failure class."""

import os
import shutil
import signal
import socket
import threading
import time

import httpx
import pytest

from serving.config import ServingConfig
from serving.errors import (
    ConfigRejected,
    OutOfMemoryAtLoad,
    OutOfMemoryWhileServing,
    PortInUse,
    ServerCrashed,
    StartupTimeout,
)
from serving.launcher import LaunchSpec, classify_failure, free_port, launch

pytestmark = pytest.mark.slow
CPU = ServingConfig.from_dict({"engine": "transformers", "args": {"threads": 1}})


def _spec(model_dir, tmp_path, name="server", **kw):
    kw.setdefault("config", CPU)
    kw.setdefault("port", free_port())
    return LaunchSpec(model_dir=model_dir, log_path=tmp_path / f"{name}.log", startup_timeout_s=120, **kw)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_start_stop_and_restart_on_the_same_port(tiny_model_dir, tmp_path):
    spec = _spec(tiny_model_dir, tmp_path)
    with launch(spec) as first:
        assert httpx.get(first.url + "/health").status_code == 200
        pid = first.pid
    assert not _alive(pid)
    with launch(spec) as second:  # the port was released
        assert second.pid != pid
        assert httpx.get(second.url + "/v1/models").status_code == 200
    assert (tmp_path / "server.config.json").exists()


def test_bad_config_is_rejected_with_the_servers_reason(tiny_model_dir, tmp_path):
    bad = ServingConfig.from_dict({"engine": "exllamav3", "env": {"EXL3_NO_SUCH_KNOB": "1"}})
    with pytest.raises(ConfigRejected, match="EXL3_NO_SUCH_KNOB") as info:
        launch(_spec(tiny_model_dir, tmp_path, config=bad))
    assert info.value.reason == "config_rejected" and info.value.exit_code == 2


def test_a_model_that_cannot_load_is_a_crash_at_load(tiny_model_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ServerCrashed, match="while loading") as info:
        launch(_spec(broken, tmp_path))
    assert info.value.exit_code == 1 and "safetensors" in info.value.log_tail.lower()


def test_out_of_memory_at_load_is_classified(tiny_model_dir, tmp_path):
    # A real allocation failure: the server's data segment is capped below what torch needs.
    with pytest.raises(OutOfMemoryAtLoad) as info:
        launch(_spec(tiny_model_dir, tmp_path, host_memory_limit_bytes=200 * 1024**2))
    assert info.value.reason == "oom_at_load"


def test_port_in_use_is_refused_before_starting(tiny_model_dir, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(PortInUse, match=str(port)):
            launch(_spec(tiny_model_dir, tmp_path, port=port))


def test_server_killed_mid_request_is_a_crash_while_serving(tiny_model_dir, tmp_path):
    server = launch(_spec(tiny_model_dir, tmp_path))
    try:
        result = {}

        def request():
            try:
                httpx.post(server.url + "/v1/chat/completions", timeout=60, json={
                    "messages": [{"role": "user", "content": "Go"}], "max_tokens": 4000, "ignore_eos": True})
            except httpx.HTTPError as exc:
                result["error"] = exc

        thread = threading.Thread(target=request)
        thread.start()
        time.sleep(1.0)
        os.killpg(server.pid, signal.SIGKILL)
        thread.join(timeout=30)
        server.process.wait(timeout=30)
        assert isinstance(result.get("error"), httpx.HTTPError)
        failure = server.check()
        assert isinstance(failure, ServerCrashed) and "signal 9" in str(failure) and "while serving" in str(failure)
    finally:
        server.stop()


def test_startup_timeout(tiny_model_dir, tmp_path):
    spec = LaunchSpec(model_dir=tiny_model_dir, config=CPU, port=free_port(), log_path=tmp_path / "slow.log",
                      startup_timeout_s=0.5)
    with pytest.raises(StartupTimeout):
        launch(spec)


@pytest.mark.parametrize(
    "tail, code, during_load, expected",
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", 1, True, OutOfMemoryAtLoad),
        ("RuntimeError: CUDA error: out of memory", -6, False, OutOfMemoryWhileServing),
        ("ERROR: [Errno 98] error while attempting to bind on address: address already in use", 1, True, PortInUse),
        ("config error: unknown key 'x'", 2, True, ConfigRejected),
        ("Segmentation fault", -11, False, ServerCrashed),
    ],
)
def test_classify_failure_from_log_tails(tail, code, during_load, expected):
    assert type(classify_failure(tail, code, during_load=during_load)) is expected


def test_a_crash_names_its_log_and_quotes_its_last_error_line(tmp_path):
    """Before: 'server ended with exit status 1 while loading', the cause only in the log the error did not name."""
    fake_python = tmp_path / "python"  # a test double for the server process: prints a load failure, exits 1
    fake_python.write_text("#!/bin/sh\necho 'Traceback (most recent call last):'\n"
                           "echo 'OSError: CUDA_HOME environment variable is not set. Please set it.'\n"
                           "echo 'INFO: shutting down'\nexit 1\n")
    fake_python.chmod(0o755)
    spec = LaunchSpec(model_dir=tmp_path, config=CPU, port=0, log_path=tmp_path / "crash.log", python=str(fake_python),
                      startup_timeout_s=30)
    with pytest.raises(ServerCrashed) as exc:
        launch(spec)
    message = str(exc.value)
    assert message.startswith("server ended with exit status 1 while loading")
    assert "last error: OSError: CUDA_HOME environment variable is not set." in message
    assert f"server log: {tmp_path / 'crash.log'}" in message
