"""What a running server holds: its engine, chat template, configuration and limits (serving.__main__ builds
it; the routes of serving.app and the response bodies of serving.responses read it)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from serving.chat_template import ChatTemplate
from serving.config import ServingConfig
from serving.engine import Engine
from serving.limits import RequestLimits

__all__ = ["ServerState"]


@dataclass
class ServerState:
    engine: Engine
    template: ChatTemplate
    config: ServingConfig
    model_dir: Path
    model_name: str
    api_key: str | None = None
    limits: RequestLimits = field(default_factory=RequestLimits)
    created: int = field(default_factory=lambda: int(time.time()))
    warned_fields: set = field(default_factory=set)
