"""Launching for the loop: a port that another process holds is the environment's fault, not the config's."""

from __future__ import annotations

import socket

import pytest

from autoresearch.ground import servers
from autoresearch.ground.errors import PortUnavailable
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
    assert "leave out --port" in str(exc.value)


def test_a_free_port_taken_before_the_bind_is_replaced_at_once(tmp_path, monkeypatch):
    """The default (port 0): a port picked as free and then taken says nothing either; no waiting for it."""
    holders = []
    for _ in range(servers.PORT_ATTEMPTS):
        holder = socket.socket()
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        holders.append(holder)
    picks = iter(h.getsockname()[1] for h in holders)
    monkeypatch.setattr(servers, "free_port", lambda: next(picks))  # each pick is taken before the launch
    monkeypatch.setattr(servers.time, "sleep", lambda s: pytest.fail(f"waited {s} s for a port nobody pinned"))
    try:
        with pytest.raises(PortUnavailable, match="4 free ports in a row were taken"):
            with servers.serve(model_dir=tmp_path, config=ServingConfig.from_dict({"engine": "transformers"}),
                               log_path=tmp_path / "s.log", pid_dir=tmp_path / "pids", port=0,
                               vram_limit_bytes=None, startup_timeout_s=5):
                pass
    finally:
        for holder in holders:
            holder.close()
