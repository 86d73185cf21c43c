"""Errors raised on purpose by the serving package.

    TunerError
    └── ServingError
        ├── ConfigError            a serving config or CLI value is invalid (also a ValueError)
        ├── AuthSetupError         the API key file is missing, not the user's own, or too open
        ├── SurfaceMismatch        the installed exllamav3 lacks an argument or variable we pass
        └── LaunchError            a launched server did not come up or died; `.reason`, `.log_tail`
            ├── ConfigRejected     the server refused its config (exit status 2)
            ├── OutOfMemoryAtLoad
            ├── OutOfMemoryWhileServing
            ├── ServerCrashed
            ├── StartupTimeout
            └── PortInUse
"""

from __future__ import annotations

from tuner_errors import TunerError

__all__ = [
    "AuthSetupError",
    "ConfigError",
    "ConfigRejected",
    "LaunchError",
    "OutOfMemoryAtLoad",
    "OutOfMemoryWhileServing",
    "PortInUse",
    "ServerCrashed",
    "ServingError",
    "StartupTimeout",
    "SurfaceMismatch",
]


class ServingError(TunerError):
    """Base for every error the serving package raises on purpose."""


class ConfigError(ServingError, ValueError):
    """A config or CLI value is invalid. The message names the key and the allowed values."""


class AuthSetupError(ServingError):
    """The API key file cannot be used; the message says why and how to fix it."""


class SurfaceMismatch(ServingError):
    """The installed exllamav3 lacks an argument or environment variable this project passes."""


class LaunchError(ServingError):
    """A server process did not reach /health, or died. `reason` is a short class name for results."""

    reason = "launch_failed"

    def __init__(self, message: str, *, log_tail: str = "", exit_code: int | None = None):
        super().__init__(message)
        self.log_tail = log_tail
        self.exit_code = exit_code


class ConfigRejected(LaunchError):
    reason = "config_rejected"


class OutOfMemoryAtLoad(LaunchError):
    reason = "oom_at_load"


class OutOfMemoryWhileServing(LaunchError):
    reason = "oom_while_serving"


class ServerCrashed(LaunchError):
    reason = "crash"


class StartupTimeout(LaunchError):
    reason = "startup_timeout"


class PortInUse(LaunchError):
    reason = "port_in_use"
