"""Start one configuration as a server process, wait for it, stop it, and say why it failed.

The loop launches a fresh process per configuration (EXL3_* variables are read at import). Each
server runs in its own process group so that stopping it reaches every child, logs to its own
file, and is stopped with SIGTERM, then SIGKILL; before the next start, its GPU memory must be
free again. Failures are classified from the exit status and the log's tail.

/health is read through the project's one client for OpenAI-compatible servers (`openai_client`),
which bench and eval use too: the server under test never imports its measurers.

Usage:
    with launch(LaunchSpec(model_dir=m, config=c, port=18020, log_path=Path("runs/x.log"))) as server:
        with Client(Endpoint(url=server.url), timeout_s=30) as client:
            client.models()
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from openai_client import Client, ClientError, Endpoint, ServerRejected
from serving import gpu_memory
from serving.config import ServingConfig
from serving.errors import (
    ConfigRejected,
    LaunchError,
    OutOfMemoryAtLoad,
    OutOfMemoryWhileServing,
    PortInUse,
    ServerCrashed,
    StartupTimeout,
)

__all__ = ["LaunchSpec", "ServerProcess", "classify_failure", "free_port", "launch", "start"]

log = logging.getLogger(__name__)

_OOM_MARKERS = (
    "out of memory",
    "outofmemoryerror",
    "cuda error: out of memory",
    "cublas_status_alloc_failed",
    "insufficient vram",
    "can't allocate memory",
    "cannot allocate memory",
    "memoryerror",
)
_PORT_MARKERS = ("address already in use", "[errno 98]", "only one usage of each socket address")


@dataclass(frozen=True, kw_only=True)
class LaunchSpec:
    model_dir: Path
    config: ServingConfig
    log_path: Path
    host: str = "127.0.0.1"
    port: int = 18020  # 0: a free one, picked at start
    pinned: bool = True  # the user chose this port; False: any free one would do (the caller picked it)
    api_key_file: Path | None = None
    vram_limit_bytes: int | None = None  # emulate a smaller GPU (24 GiB: an RTX 3090)
    host_memory_limit_bytes: int | None = None  # RLIMIT_DATA of the server: emulate a smaller machine
    startup_timeout_s: float = 900.0
    python: str = sys.executable
    extra_env: Mapping[str, str] = field(default_factory=dict)
    server_args: tuple[str, ...] = ()  # more `python -m serving` flags, e.g. ("--header-timeout", "5")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


class ServerProcess:
    """A running server. Use as a context manager, or call `stop()`."""

    def __init__(self, spec: LaunchSpec, process: subprocess.Popen, gpu_baseline: gpu_memory.Snapshot | None):
        self.spec = spec
        self.process = process
        self.url = spec.url
        self._gpu_baseline = gpu_baseline
        self.ready = False
        self.stopped = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def log_tail(self, max_bytes: int = 20_000) -> str:
        return _tail(self.spec.log_path, max_bytes)

    def wait_ready(self) -> None:
        """Poll /health until 200; raise the classified LaunchError if the server dies or times out."""
        deadline = time.monotonic() + self.spec.startup_timeout_s
        with Client(Endpoint(url=self.url), timeout_s=5.0, connect_timeout_s=5.0) as client:
            while time.monotonic() < deadline:
                failure = self.failure()
                if failure is not None:
                    raise failure
                with contextlib.suppress(ClientError):  # not listening yet
                    if client.health():
                        self.ready = True
                        return
                time.sleep(0.25)
        raise StartupTimeout(
            f"server did not become healthy within {self.spec.startup_timeout_s:.0f} s"
            f"{_cause_and_log(self.log_tail(), self.spec.log_path)}", log_tail=self.log_tail()
        )

    def failure(self) -> LaunchError | None:
        """None while the process lives; else the classified reason it ended."""
        code = self.process.poll()
        if code is None:
            return None
        return classify_failure(self.log_tail(), code, during_load=not self.ready, log_path=self.spec.log_path)

    def check(self) -> LaunchError | None:
        """Like `failure()`, but also reports a living server whose engine died or ran out of memory."""
        failure = self.failure()
        if failure is not None:
            return failure
        text = self.log_tail().lower()
        if self.ready and any(m in text for m in _OOM_MARKERS):
            return OutOfMemoryWhileServing("the server ran out of memory while serving a request",
                                           log_tail=self.log_tail()[-4000:])
        if self.ready:
            try:
                with Client(Endpoint(url=self.url), timeout_s=10.0) as client:
                    client.get_json("/health")
            except ServerRejected as exc:
                # after it was ready, this server answers 503 only when its engine failed ({"status": "failed",
                # "error": ...}; "loading" comes before ready): the client's detail is that error
                if exc.status == 503:
                    return ServerCrashed(f"the server's engine died: {exc.detail}", log_tail=self.log_tail()[-4000:])
            except ClientError:
                return None  # busy or slow is not dead; the process lives
        return None

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the process group, SIGKILL after `timeout_s`, then wait for GPU memory to be released."""
        if self.stopped:
            return
        self.stopped = True
        _signal_group(self.process, signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("server pid %d ignored SIGTERM for %.0f s; killing its group", self.pid, timeout_s)
            _signal_group(self.process, signal.SIGKILL)
            self.process.wait(timeout=30)
        _signal_group(self.process, signal.SIGKILL)  # children that outlived the leader
        if self._gpu_baseline is not None:
            gpu_memory.wait_released(self._gpu_baseline, pid=self.pid)


def launch(spec: LaunchSpec) -> ServerProcess:
    """Start and wait until healthy. Raises a LaunchError subclass; the process is gone by then."""
    server = start(spec)
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


def start(spec: LaunchSpec) -> ServerProcess:
    """Spawn the server without waiting for it (call `wait_ready`); raises PortInUse before spawning.

    Port 0 takes a free port (the returned server's `spec` and `url` name it)."""
    if spec.port == 0:
        spec = dataclasses.replace(spec, port=free_port(spec.host), pinned=False)
    if not port_is_free(spec.host, spec.port):
        advice = ("stop whatever listens there or choose another --port" if spec.pinned
                  else "taken since it was picked as free; pick another")
        raise PortInUse(f"port {spec.port} on {spec.host} is already in use; {advice}")
    spec.log_path.parent.mkdir(parents=True, exist_ok=True)
    config_path = spec.log_path.with_suffix(".config.json")
    config_path.write_text(spec.config.to_json())
    cmd = [spec.python, "-m", "serving", "--model", str(spec.model_dir), "--config", str(config_path),
           "--host", spec.host, "--port", str(spec.port)]
    if spec.api_key_file is not None:
        cmd += ["--api-key-file", str(spec.api_key_file)]
    if spec.vram_limit_bytes:
        cmd += ["--vram-limit", str(spec.vram_limit_bytes)]
    cmd += list(spec.server_args)
    env = {**os.environ, **spec.extra_env, "PYTHONUNBUFFERED": "1"}
    gpu_baseline = gpu_memory.snapshot(env)  # the GPU the server will use, by its own environment
    log.info("launching %s config %s on port %d, log %s", spec.config.engine, spec.config.digest[:12], spec.port,
             spec.log_path)
    log_file = open(spec.log_path, "ab")  # noqa: SIM115 - the child owns it after Popen
    try:
        process = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=env, start_new_session=True,
                                   preexec_fn=_limit_memory(spec.host_memory_limit_bytes))
    finally:
        log_file.close()
    return ServerProcess(spec, process, gpu_baseline)


def classify_failure(log_tail: str, exit_code: int | None, *, during_load: bool,
                     log_path: Path | None = None) -> LaunchError:
    """Name the failure from what the server printed last and how it exited; out of memory and crashes
    quote the log's last error line and name the log, so the cause is in the one line a user reads."""
    text = log_tail.lower()
    tail = log_tail[-4000:]
    if exit_code == 2 and "config error:" in text:
        message = next((line for line in reversed(log_tail.splitlines()) if "config error:" in line), "config error")
        return ConfigRejected(message.strip(), log_tail=tail, exit_code=exit_code)
    if any(m in text for m in _PORT_MARKERS):
        return PortInUse("the server could not bind its port (address already in use)", log_tail=tail,
                         exit_code=exit_code)
    if any(m in text for m in _OOM_MARKERS):
        cls = OutOfMemoryAtLoad if during_load else OutOfMemoryWhileServing
        phase = "loading the model" if during_load else "serving"
        return cls(f"out of memory while {phase}{_cause_and_log(log_tail, log_path)}", log_tail=tail,
                   exit_code=exit_code)
    how = f"signal {-exit_code}" if exit_code is not None and exit_code < 0 else f"exit status {exit_code}"
    phase = "while loading" if during_load else "while serving"
    return ServerCrashed(f"server ended with {how} {phase}{_cause_and_log(log_tail, log_path)}", log_tail=tail,
                         exit_code=exit_code)


_ERROR_LINE = re.compile(r"^\s*(?:[\w.]*(?:Error|Exception|Exit)\b|error:|fatal:)", re.IGNORECASE)


def _cause_and_log(log_tail: str, log_path: Path | None) -> str:
    """'; last error: <line>; server log: <path>' for a message (each part only where known)."""
    cause = next((line.strip() for line in reversed(log_tail.splitlines()) if _ERROR_LINE.match(line)), None)
    parts = ([f"last error: {cause[:300]}"] if cause else []) + ([f"server log: {log_path}"] if log_path else [])
    return "".join(f"; {part}" for part in parts)


def port_is_free(host: str, port: int) -> bool:
    """Whether a server could bind `port` now: as uvicorn binds, with SO_REUSEADDR, so a port whose
    last connections linger in TIME_WAIT (for a minute after a crash) is free, and one that another
    process listens on is not."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _limit_memory(limit: int | None):
    if not limit:
        return None

    def apply() -> None:  # runs in the child between fork and exec
        import resource

        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

    return apply


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _tail(path: Path, max_bytes: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read().decode(errors="replace")
    except OSError:
        return ""
