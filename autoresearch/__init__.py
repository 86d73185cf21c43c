"""The tuning loop: propose a serving configuration, launch it, measure speed, gate intelligence, record.

Usage:
    python -m autoresearch                      # the embedded default: tiny model, CPU engine, offline suite
    python -m autoresearch --suite broad --model DIR [--trials N | --hours H] [--vram 24GiB]
    python -m autoresearch export               # the champion as a serving config
"""
