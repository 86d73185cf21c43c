"""report: RESULTS.md from one snapshot of the store, and its plot (the order: autoresearch/__init__.py).
"""
