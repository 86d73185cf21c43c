"""Launching for the loop: a port that another process holds is the environment's fault, not the config's."""

from __future__ import annotations

import socket

import pytest

from autoresearch import servers
from autoresearch.errors import PortUnavailable
from serving.config import ServingConfig
from serving.errors import LaunchError


def test_a_port_held_by_another_process_is_retried_then_stops_the_loop(tmp_path, monkeypatch):
    monkeypatch.setattr(servers, "PORT_RETRY_S", 0.01)
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        with pytest.raises(PortUnavailable, match=f"port {port} stayed in use .* over 4 launch attempts") as exc:
            with servers.serve(model_dir=tmp_path, config=ServingConfig.from_dict({"engine": "transformers"}),
                               log_path=tmp_path / "s.log", pid_dir=tmp_path / "pids", port=port,
                               vram_limit_bytes=None, startup_timeout_s=5):
                pass
    finally:
        holder.close()
    assert not isinstance(exc.value, LaunchError)  # the trial code records LaunchErrors against a config; not this
    assert "--port 0" in str(exc.value)
