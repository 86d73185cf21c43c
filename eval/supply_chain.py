"""`python -m eval setup | data | image`: the Prime suites' supply chain (eval.prime) from the command line.

eval/__main__.py registers these subcommands (`add_parsers`) and runs them (`COMMANDS`, given the parsed
arguments and the cache's paths); each subcommand's flags sit beside what it runs. eval.prime is imported only
when one of them runs: the offline path never loads it (tests/eval/test_offline_path.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from eval.errors import EvalConfigError, EvalError
from eval.paths import EvalPaths

__all__ = ["COMMANDS", "add_parsers"]


def add_parsers(sub, add_common: Callable[[argparse.ArgumentParser], None]) -> None:
    setup_ = sub.add_parser("setup", help="fetch the pinned prime-environments commit and install its tasksets")
    setup_.add_argument("--check", action="store_true", help="verify checkout and installs without network")
    setup_.add_argument("environments", nargs="*", help="only these (default: every pinned one)")
    add_common(setup_)

    data_ = sub.add_parser("data", help="download and verify a pinned dataset (NAME from locks/datasets.toml)")
    data_.add_argument("name", help="dataset name, or 'all'")
    data_.add_argument("--check", action="store_true", help="verify the cached files only; no network")
    add_common(data_)

    image_ = sub.add_parser("image", help="write the runtime image's build context and build it with Docker")
    image_.add_argument("--context", type=Path, help="where to write the context (default: CACHE/runtime-image)")
    image_.add_argument("--no-build", action="store_true", help="write the context and print the build command")
    add_common(image_)


def setup(args: argparse.Namespace, paths: EvalPaths) -> int:
    from eval.prime import checkout_dir, ensure_checkout, install_environments, load_locks, verify_checkout
    from eval.runner import is_installed

    locks = load_locks(args.locks_dir)
    if args.check:
        verify_checkout(locks, checkout_dir(paths))
        missing = [n for n in (args.environments or sorted(locks.environments)) if not is_installed(n)]
        if missing:
            raise EvalError(f"checkout ok, but not installed: {', '.join(missing)}; run `python -m eval setup`")
        print(f"prime_environments: {locks.commit} (verified)")
        return 0
    checkout = ensure_checkout(locks, paths)
    installed = install_environments(locks, checkout, args.environments or None)
    print(f"prime_environments: {locks.commit}")
    for name in installed:
        print(f"installed: {name} {locks.environments[name].version}")
    return 0


def image(args: argparse.Namespace, paths: EvalPaths) -> int:
    import shlex
    import subprocess

    from eval.prime import build_command, image_id, image_tag, write_context

    context = write_context(args.context or paths.cache_dir / "runtime-image")
    command = build_command(context)
    print(f"build: {shlex.join(command)}")
    if args.no_build:
        return 0
    if subprocess.run(command).returncode != 0:
        raise EvalError(f"docker build failed; the context is in {context}")
    print(f"image: {image_tag()} {image_id(image_tag())}")
    return 0


def data(args: argparse.Namespace, paths: EvalPaths) -> int:
    from eval.prime import check_dataset, download_dataset, load_locks

    locks = load_locks(args.locks_dir)
    names = sorted(locks.datasets) if args.name == "all" else [args.name]
    for name in names:
        if name not in locks.datasets:
            raise EvalConfigError(f"unknown dataset {name!r}; pinned: {', '.join(sorted(locks.datasets))}, or 'all'")
        pin = locks.datasets[name]
        snapshot = check_dataset(paths, pin) if args.check else download_dataset(paths, pin)
        print(f"verified: {name} {pin.repo}@{pin.revision} ({len(pin.files)} files, {pin.size_bytes} bytes) {snapshot}")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace, EvalPaths], int]] = {"setup": setup, "data": data, "image": image}
