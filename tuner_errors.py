"""The one root of every error this project raises on purpose.

Each package's base error subclasses `TunerError` (drawn at the top of each package's errors.py),
so each `__main__` catches the project's deliberate errors once, and anything else is a bug that
keeps its traceback.

    TunerError
    ├── ClientError         openai_client: the HTTP client for OpenAI-compatible servers
    ├── ServingError        serving: the server, its config and its launcher
    ├── SearchSpaceError    search_space: the knobs, the space, the memory model
    ├── BenchError          bench: speed measurement
    ├── EvalError           eval: the intelligence gate
    ├── GpuError            gpu: the device rule and NVML reads
    └── AutoresearchError   autoresearch: the loop
"""

from __future__ import annotations

__all__ = ["TunerError"]


class TunerError(Exception):
    """Base for every error this project raises on purpose."""
