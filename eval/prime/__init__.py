"""eval.prime: the Prime/Docker supply chain of the `broad`, `smoke`, `quick` and `full` suites.

The pinned prime-environments tasksets and their locks (locks/prime-environments.toml,
locks/datasets.toml), the checkout and installs of `python -m eval setup` (`sources`), the pinned Hub
data of `python -m eval data` (`snapshots`), the Docker runtime image of `python -m eval image`
(`runtime_image`, built from `runtime/`) and the preflight of all of it (`preflight`).

The offline suites need none of it: eval's offline path (suites, runner, worker, harness, decision,
store) imports nothing from here at import time, and reaches it only for a suite that needs it
(`SuiteSpec.needs_prime`: eval.preflight, eval.run_config) and at the runner's one seam, which records
the pins every run ran under (`eval.runner._supply_chain`).

Usage:
    locks = load_locks()
    missing_prime_pieces(get_suite("broad"), locks=locks, paths=EvalPaths.default())
    checkout = ensure_checkout(locks, paths); install_environments(locks, checkout)   # eval setup
    download_dataset(paths, locks.datasets["aime25"])                                 # eval data
    write_context(directory); build_command(directory); image_id(image_tag())         # eval image
"""

from eval.prime.locks import Locks, load_locks
from eval.prime.preflight import check_pins, is_dataset_ready, missing_prime_pieces
from eval.prime.runtime_image import build_command, image_id, image_tag, write_context
from eval.prime.snapshots import bind_dataset, check_dataset, download_dataset
from eval.prime.sources import checkout_dir, ensure_checkout, install_environments, verify_checkout

__all__ = [
    "Locks",
    "bind_dataset",
    "build_command",
    "check_dataset",
    "check_pins",
    "checkout_dir",
    "download_dataset",
    "ensure_checkout",
    "image_id",
    "image_tag",
    "install_environments",
    "is_dataset_ready",
    "load_locks",
    "missing_prime_pieces",
    "verify_checkout",
    "write_context",
]
