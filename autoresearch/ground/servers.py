"""Launching servers for the loop, and cleaning up after a loop that was killed.

Every launch of a study is spelled once, by its `ServerSpec` (`RunPlan.server_spec`; the sweep builds
its own): only the configuration and the log's name change from one launch to the next.

A loop killed with SIGKILL leaves its server running (it lives in its own process group), holding
the port and the GPU. Every launch writes a pid file naming the server and the loop that owns it;
at start-up, servers whose loop is gone are stopped (the stale-server guard).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from autoresearch.ground.errors import PortUnavailable
from serving.config import ServingConfig
from serving.errors import PortInUse
from serving.launcher import LaunchSpec, ServerProcess, free_port, start

__all__ = ["ServerSpec", "reap_orphan_servers", "serve"]

log = logging.getLogger(__name__)
PORT_ATTEMPTS = 4
PORT_RETRY_S = 5.0  # times the attempt number: 5, 10, 15 s


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_our_server(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"-m" in cmdline and b"serving" in cmdline


def reap_orphan_servers(pid_dir: Path) -> int:
    """Stop servers left behind by a loop that no longer runs; returns how many were stopped."""
    stopped = 0
    if not pid_dir.exists():
        return 0
    for path in pid_dir.glob("*.pid"):
        try:
            server_pid, owner_pid = (int(x) for x in path.read_text().split())
        except ValueError:
            path.unlink(missing_ok=True)
            continue
        if _alive(owner_pid):
            continue  # another worker's live server
        if _alive(server_pid) and _is_our_server(server_pid):
            log.warning("stopping server pid %d left by a killed loop (pid %d)", server_pid, owner_pid)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server_pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while _alive(server_pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server_pid, signal.SIGKILL)
            stopped += 1
        path.unlink(missing_ok=True)
    return stopped


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerSpec:
    """Where and how a study's servers run; `launch` adds the configuration and names the log."""

    model_dir: Path
    log_dir: Path  # <log_name>.log per launch
    pid_dir: Path  # the stale-server guard's pid files
    port: int = 0  # 0: a free port per launch; else pinned
    vram_limit_bytes: int | None = None  # cap the server's GPU memory (an emulated smaller GPU)
    host_memory_limit_bytes: int | None = None  # cap its data segment (an emulated smaller CPU machine)
    startup_timeout_s: float = 900.0

    def launch(self, config: ServingConfig, log_name: str) -> contextlib.AbstractContextManager[ServerProcess]:
        """A fresh server of `config`, logging to `log_dir/<log_name>.log` (see `serve`)."""
        return serve(model_dir=self.model_dir, config=config, log_path=self.log_dir / f"{log_name}.log",
                     pid_dir=self.pid_dir, port=self.port, vram_limit_bytes=self.vram_limit_bytes,
                     host_memory_limit_bytes=self.host_memory_limit_bytes, startup_timeout_s=self.startup_timeout_s)


@contextlib.contextmanager
def serve(*, model_dir: Path, config: ServingConfig, log_path: Path, pid_dir: Path, port: int,
          vram_limit_bytes: int | None, startup_timeout_s: float,
          host_memory_limit_bytes: int | None = None) -> Iterator[ServerProcess]:
    """Launch, record the pid file, yield the running server, stop it and remove the pid file.

    `port` 0 (the default) takes a free port per launch; a port taken between its pick and the
    server's bind is replaced at once. A pinned port (`--port N`) that is taken says nothing about
    the configuration: the launch is retried (a server that is still stopping lets go of it), and if
    the port stays taken, PortUnavailable stops the loop rather than failing a configuration that
    never ran.
    """
    pid_dir.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, PORT_ATTEMPTS + 1):
        spec = LaunchSpec(model_dir=model_dir, config=config, log_path=log_path, port=port or free_port(),
                          pinned=bool(port), vram_limit_bytes=vram_limit_bytes, host_memory_limit_bytes=host_memory_limit_bytes,
                          startup_timeout_s=startup_timeout_s)
        try:
            server = start(spec)
        except PortInUse as exc:
            _wait_for_port(spec, attempt, exc)
            continue
        pid_file = pid_dir / f"{server.pid}.pid"
        pid_file.write_text(f"{server.pid} {os.getpid()}\n")  # before waiting: a kill during load is covered
        try:
            try:
                server.wait_ready()
            except PortInUse as exc:  # taken between the check and the server's bind
                server.stop()
                _wait_for_port(spec, attempt, exc)
                continue
            yield server
            return
        finally:
            server.stop()
            pid_file.unlink(missing_ok=True)
    raise AssertionError("unreachable")


def _wait_for_port(spec: LaunchSpec, attempt: int, exc: PortInUse) -> None:
    port = spec.port
    if attempt == PORT_ATTEMPTS:
        if not spec.pinned:
            raise PortUnavailable(f"{PORT_ATTEMPTS} free ports in a row were taken before the server could bind "
                                  f"them (last: {port}: {exc}); something on this host takes ports as fast as "
                                  "they are freed")
        raise PortUnavailable(f"port {port} stayed in use by another process over {PORT_ATTEMPTS} launch attempts "
                              f"({exc}); stop whatever listens there, or leave out --port for a free port per launch")
    if not spec.pinned:
        log.info("free port %d was taken before the server bound it; launching on another", port)
        return
    log.warning("port %d is in use (%s); launching again in %.0f s", port, exc, PORT_RETRY_S * attempt)
    time.sleep(PORT_RETRY_S * attempt)
