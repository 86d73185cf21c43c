"""Write synthetic checkpoints, deterministic by seed.

Usage:
    python -m serving.synthetic tiny DIR [--seed 0]
    python -m serving.synthetic qwen3.8-27b DIR [--bits 4.0] [--head-bits 6] [--layers N] [--seed 0]
                                               [--mtp-layers 1] [--mtp-bits 4]    # with the MTP head
    python -m serving.synthetic qwen3.8-27b-dflash2 DIR [--bits 4.0] [--seed 0]   # its DFlash2 drafter (random)
    python -m serving.synthetic exl3-input HF_DIR OUT_DIR     # tiny model -> exllamav3 converter layout

Turning the tiny model into EXL3 with exllamav3's own converter (GPU machine):
    python -m serving.synthetic tiny /tmp/tiny
    python -m serving.synthetic exl3-input /tmp/tiny /tmp/tiny-in
    python -m exllamav3.conversion.convert_model -i /tmp/tiny-in -o /tmp/tiny-exl3 -w /tmp/work -b 4.0 -hb 6 -cr 16 -cc 256
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m serving.synthetic", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="kind", required=True)
    tiny = sub.add_parser("tiny", help="tiny random Qwen3_5 text model in Hugging Face format")
    tiny.add_argument("out_dir", type=Path)
    tiny.add_argument("--seed", type=int, default=0)
    big = sub.add_parser("qwen3.8-27b", help="shape-true EXL3 checkpoint with random codes")
    big.add_argument("out_dir", type=Path)
    big.add_argument("--bits", type=float, default=4.0)
    big.add_argument("--head-bits", type=int, default=6)
    big.add_argument("--layers", type=int, default=None, help="decoder layers (default 64); 3 GDN : 1 attention")
    big.add_argument("--seed", type=int, default=0)
    big.add_argument("--mtp-layers", type=int, default=0,
                     help="MTP layers (the published Qwen3.8-27B has 1): writes the multimodal config exllamav3 "
                          "builds an MTP drafter for. Random weights: MTP acceptance is near zero, so only its "
                          "plumbing, memory and per-step cost are the real model's. Default 0: the text-only layout")
    big.add_argument("--mtp-bits", type=int, default=4, help="MTP layers' bits (exllamav3's converter default 4)")
    draft = sub.add_parser("qwen3.8-27b-dflash2",
                           help="shape-true EXL3 DFlash2 drafter for the 27B, random codes: it drafts nothing "
                                "useful (acceptance about zero); only its memory, plumbing and per-round cost "
                                "are the published drafter's")
    draft.add_argument("out_dir", type=Path)
    draft.add_argument("--bits", type=float, default=4.0)
    draft.add_argument("--seed", type=int, default=0)
    conv = sub.add_parser("exl3-input", help="copy a tiny model into the layout exllamav3's converter reads")
    conv.add_argument("hf_dir", type=Path)
    conv.add_argument("out_dir", type=Path)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    start = time.perf_counter()
    if args.kind == "tiny":
        from serving.synthetic.tiny import write_tiny_model

        out = write_tiny_model(args.out_dir, seed=args.seed)
    elif args.kind == "qwen3.8-27b":
        from serving.synthetic.exl3 import QWEN38_27B, write_exl3_checkpoint

        if args.layers is not None and args.layers < 1:
            print("--layers must be >= 1", file=sys.stderr)
            return 2
        if not 1.0 <= args.bits <= 8.0 or round(args.bits * 16) != args.bits * 16:
            print("--bits must be between 1 and 8 in steps of 1/16", file=sys.stderr)
            return 2
        if args.mtp_layers < 0 or not 1 <= args.mtp_bits <= 8:
            print("--mtp-layers must be >= 0 and --mtp-bits 1..8", file=sys.stderr)
            return 2
        out = write_exl3_checkpoint(args.out_dir, QWEN38_27B, bits=args.bits, head_bits=args.head_bits,
                                    layers=args.layers, mtp_layers=args.mtp_layers, mtp_bits=args.mtp_bits,
                                    seed=args.seed)
    elif args.kind == "qwen3.8-27b-dflash2":
        from serving.synthetic.dflash2 import write_dflash2_drafter

        if not 1.0 <= args.bits <= 8.0 or round(args.bits * 16) != args.bits * 16:
            print("--bits must be between 1 and 8 in steps of 1/16", file=sys.stderr)
            return 2
        out = write_dflash2_drafter(args.out_dir, bits=args.bits, seed=args.seed)
    else:
        from serving.synthetic.tiny import prepare_for_exl3

        out = prepare_for_exl3(args.hf_dir, args.out_dir)
    print(f"wrote {out} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
