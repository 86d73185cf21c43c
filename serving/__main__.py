"""Serve one model with one configuration over an OpenAI-compatible HTTP API.

Usage:
    python -m serving --model DIR --config FILE.json [--host 127.0.0.1] [--port 18020] [--api-key-file PATH]
                      [--draft-model DIR]
    python -m serving --model embedded:tiny [--config champion.json]   # the embedded default's tiny model (CPU)

The config's EXL3_* variables are set here, before anything imports exllamav3: this module is the
only place that touches os.environ, and each configuration gets a fresh process.
Exit status: 0 after a clean shutdown, 1 when the model failed to load, 2 for a bad config or key.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from serving.limits import RequestLimits
from serving.units import parse_bytes
from tuner_errors import TunerError

log = logging.getLogger("serving")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m serving", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, type=Path,
                        help="model folder (EXL3 or Hugging Face format), or embedded:tiny: the tiny synthetic model "
                        "`python -m autoresearch` runs without --model (generated once into AUTORESEARCH_CACHE)")
    parser.add_argument("--config", type=Path, help="serving config JSON (see serving/README.md); "
                        "absent: the engine's defaults")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind; anything but loopback needs --api-key-file")
    parser.add_argument("--port", type=int, default=18020)
    parser.add_argument("--api-key-file", type=Path, help="file holding the bearer key (mode 0600 or 0400, yours)")
    parser.add_argument("--draft-model", type=Path, default=None,
                        help="draft checkpoint for speculative decoding (exllamav3): a DFlash drafter or a small "
                        "causal LM with the model's vocabulary; its kind sets the config's draft_mode "
                        "(dflash or draft_model). A config that names another draft_mode or directory is refused")
    parser.add_argument("--vram-limit", type=parse_bytes, default=None,
                        help="cap this process's GPU memory, e.g. 24GiB to emulate an RTX 3090 on a larger GPU")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    limits = parser.add_argument_group("request limits (defaults suit loopback use)")
    limits.add_argument("--max-body-bytes", type=parse_bytes, default=RequestLimits.max_body_bytes,
                        help="larger bodies get 413 (default 8MiB)")
    limits.add_argument("--body-timeout", type=float, default=RequestLimits.body_timeout_s,
                        help="seconds for a request's body to arrive, else 408 (default 30)")
    limits.add_argument("--header-timeout", type=float, default=RequestLimits.header_timeout_s,
                        help="seconds for a request's headers to arrive, else the socket is closed (default 10)")
    limits.add_argument("--max-connections", type=int, default=RequestLimits.max_connections,
                        help="requests and connections at once, 503 beyond; 4x this many sockets are closed "
                        "at once (default 256)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    try:
        state = prepare(args)
    except TunerError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    return serve(state, host=args.host, port=args.port, log_level=args.log_level)


def prepare(args: argparse.Namespace):
    """Everything that can fail on bad input, before the engine loads."""
    from serving.auth import is_loopback, read_api_key
    from serving.chat_template import ChatTemplate
    from serving.config import ServingConfig, engine_for_checkpoint
    from serving.errors import ConfigError
    from serving.synthetic.embedded import EMBEDDED_DEFAULT, default_cache_dir, embedded_model_dir

    if str(args.model) == EMBEDDED_DEFAULT:  # what the embedded default's export prints
        args.model = embedded_model_dir(default_cache_dir())
    if not args.model.is_dir():
        raise ConfigError(f"--model {args.model} is not a folder (nor {EMBEDDED_DEFAULT}, the embedded default)")
    api_key = read_api_key(args.api_key_file) if args.api_key_file else None
    if api_key is None and not is_loopback(args.host):
        raise ConfigError(f"refusing to listen on non-loopback address {args.host} without --api-key-file")
    text = args.config.read_text() if args.config else "{}"
    config = ServingConfig.from_json(text, default_engine_name=engine_for_checkpoint(args.model))
    if args.draft_model is not None:
        config = with_draft_model(config, args.draft_model)
    # Applied before exllamav3 is imported (it reads EXL3_* at import): the reason for a fresh process.
    os.environ.update(config.env)
    template = ChatTemplate.from_model_dir(args.model)
    engine = build_engine(config, args.model, vram_limit_bytes=args.vram_limit)
    from serving.state import ServerState

    name = config.served_model_name or args.model.resolve().name
    limits = RequestLimits(max_body_bytes=args.max_body_bytes, body_timeout_s=args.body_timeout,
                           header_timeout_s=args.header_timeout, max_connections=args.max_connections)
    return ServerState(engine=engine, template=template, config=config, model_dir=args.model.resolve(),
                       model_name=name, api_key=api_key, limits=limits)


def with_draft_model(config, draft_dir: Path):
    """The config drafting with `draft_dir` in the mode its architecture calls for (serving.drafter)."""
    from serving.drafter import read_drafter
    from serving.errors import ConfigError

    if config.engine != "exllamav3":
        raise ConfigError(f"--draft-model applies to the exllamav3 engine; this config's engine is {config.engine!r}")
    if not draft_dir.is_dir():
        raise ConfigError(f"--draft-model {draft_dir} is not a folder")
    drafter = read_drafter(draft_dir)
    args = config.args
    if args.draft_mode not in ("none", drafter.draft_mode):
        raise ConfigError(f"--draft-model {draft_dir} is a {drafter.architecture} checkpoint (draft_mode "
                          f"{drafter.draft_mode!r}), but the config sets draft_mode {args.draft_mode!r}")
    if args.draft_model_dir is not None and Path(args.draft_model_dir).resolve() != draft_dir.resolve():
        raise ConfigError(f"--draft-model {draft_dir} differs from the config's draft_model_dir {args.draft_model_dir}")
    return config.with_args(draft_mode=drafter.draft_mode, draft_model_dir=str(draft_dir))


def build_engine(config, model_dir: Path, *, vram_limit_bytes: int | None = None):
    from serving.textcodec import TextCodec

    codec = TextCodec(model_dir)
    if config.engine == "transformers":
        from serving.transformers_engine import TransformersEngine

        if vram_limit_bytes:
            log.info("--vram-limit ignored: the transformers engine runs on the CPU")
        return TransformersEngine(model_dir, config.args, codec)
    from serving.exllamav3_engine import Exl3Engine

    engine = Exl3Engine(model_dir, config.args, codec, env=config.env, vram_limit_bytes=vram_limit_bytes)
    engine.check_surface()  # before loading: a knob the installed exllamav3 lacks is a config error
    engine.check_drafter()  # the draft checkpoint's kind and vocabulary, before anything loads
    return engine


def serve(state, *, host: str, port: int, log_level: str) -> int:
    import uvicorn

    from serving.app import create_app

    if state.config.engine == "exllamav3":
        # The GPU thread must not be preempted by the HTTP thread mid-step (CPython's default forces a
        # switch every 5 ms): HTTP work then runs only while the GPU thread waits on the device.
        sys.setswitchinterval(0.05)
    state.engine.start()
    app = create_app(state, allowed_hosts=_allowed_hosts(host, port) if state.api_key is None else None)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level if log_level != "info" else "warning",
                            access_log=False, timeout_graceful_shutdown=5, loop=_fastest("uvloop", "asyncio"),
                            http=_http_protocol(state.limits), limit_concurrency=state.limits.max_connections,
                            timeout_keep_alive=5)
    server = uvicorn.Server(config)
    exit_code = {"value": 0}

    async def watch_engine():
        import asyncio

        while not state.engine.ready.is_set():
            await asyncio.sleep(0.2)
        if state.engine.failed is not None:
            log.error("model failed to load: %s", state.engine.failed)
            exit_code["value"] = 1
            server.should_exit = True

    async def run():
        import asyncio

        watcher = asyncio.create_task(watch_engine())
        await server.serve()
        watcher.cancel()

    import asyncio

    log.info("serving %s (%s engine, config %s) on http://%s:%d", state.model_name, state.config.engine,
             state.config.digest[:12], host, port)
    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:  # uvloop, as the config chose
        runner.run(run())
    state.engine.stop()
    if not server.started and exit_code["value"] == 0:
        return 1  # uvicorn could not bind (the port is taken); it logged why
    return exit_code["value"]


def _allowed_hosts(host: str, port: int) -> list[str]:
    """Host headers a keyless loopback server answers: its own names only, so a web page that rebinds
    a DNS name to 127.0.0.1 cannot drive it (DNS rebinding)."""
    names = {host, "localhost", "127.0.0.1", "[::1]"} if host in ("127.0.0.1", "localhost", "::1") else {host}
    return sorted(n for name in names for n in (name, f"{name}:{port}"))


def _http_protocol(limits):
    """httptools (uvicorn[standard], a dependency) with the header deadline and the socket cap."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from serving.connections import guarded_protocol

    return guarded_protocol(HttpToolsProtocol, header_timeout_s=limits.header_timeout_s,
                            max_open=4 * limits.max_connections)


def _fastest(preferred: str, fallback: str) -> str:
    """uvloop and httptools (uvicorn[standard]) cut per-token HTTP cost; fall back where absent."""
    import importlib.util

    return preferred if importlib.util.find_spec(preferred) else fallback


if __name__ == "__main__":
    raise SystemExit(main())
