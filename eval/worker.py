"""One taskset, one process: `python -m eval.worker CONFIG.json` runs verifiers' run_eval on it.

The parent (eval.runner) sets the offline environment and working directory; this process
registers the project's plugins, validates the EvalConfig with verifiers' own schema and runs it.
Exit status: 0 when the run finished (episodes may still be ok=false: that is data, not a crash),
1 when verifiers raised.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m eval.worker CONFIG.json", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    from eval.plugins import register_plugins

    register_plugins()
    config = EvalConfig.model_validate(json.loads(Path(args[0]).read_text()))
    episodes = asyncio.run(run_eval(config))
    print(f"episodes: {len(episodes)}")
    print(f"ok: {sum(e.ok for e in episodes)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
