"""Render the model folder's own Jinja2 chat template, as Hugging Face would, without transformers.

The template comes from chat_template.jinja, else tokenizer_config.json's `chat_template` (a
string, or a list of named templates where "default" wins). Rendering runs in Jinja2's immutable
sandbox with the helpers HF templates expect (raise_exception, strftime_now, tojson).
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from serving.errors import ConfigError

__all__ = ["RESERVED_TEMPLATE_ARGS", "ChatTemplate", "TemplateError"]

# what render() passes itself: a request's chat_template_kwargs may not set them
RESERVED_TEMPLATE_ARGS = ("messages", "add_generation_prompt", "bos_token", "eos_token")


class TemplateError(ValueError):
    """The template refused the messages (raise_exception) or failed to render them."""


def _raise(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, **_: Any) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)


class ChatTemplate:
    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = ""):
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise ConfigError(f"the model's chat template does not parse: {exc}") from exc
        self.bos_token = bos_token
        self.eos_token = eos_token

    @classmethod
    def from_model_dir(cls, model_dir: Path) -> ChatTemplate:
        model_dir = Path(model_dir)
        config_path = model_dir / "tokenizer_config.json"
        config = json.loads(config_path.read_text()) if config_path.exists() else {}
        source = None
        if (model_dir / "chat_template.jinja").exists():
            source = (model_dir / "chat_template.jinja").read_text()
        elif (model_dir / "chat_template.json").exists():
            source = json.loads((model_dir / "chat_template.json").read_text()).get("chat_template")
        else:
            source = config.get("chat_template")
            if isinstance(source, list):
                named = {t.get("name"): t.get("template") for t in source}
                source = named.get("default") or next(iter(named.values()), None)
        if not source:
            raise ConfigError(
                f"no chat template in {model_dir} (looked for chat_template.jinja, chat_template.json "
                "and tokenizer_config.json's chat_template)"
            )
        return cls(source, bos_token=_token_text(config.get("bos_token")), eos_token=_token_text(config.get("eos_token")))

    def render(self, messages: list[dict], *, add_generation_prompt: bool = True, **kwargs: Any) -> str:
        clash = sorted(set(kwargs) & set(RESERVED_TEMPLATE_ARGS))
        if clash:
            raise TemplateError(f"template arguments {', '.join(clash)} are set by the server")
        try:
            return self._template.render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **kwargs,
            )
        except TemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise TemplateError(f"chat template failed: {exc}") from exc


def _token_text(token: Any) -> str:
    if isinstance(token, dict):
        return token.get("content", "")
    return token or ""
