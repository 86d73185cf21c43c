"""Deterministic synthetic checkpoints: a tiny random Qwen3_5 and shape-true EXL3 ones."""
