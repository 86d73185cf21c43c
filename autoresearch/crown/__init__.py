"""crown: the finalists re-measured in fresh launches, and the champion (the order:
autoresearch/__init__.py).
"""
