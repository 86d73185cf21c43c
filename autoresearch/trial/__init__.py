"""trial: one trial in stages, cheapest first; the baseline's protocol; the standalone sweep (the order:
autoresearch/__init__.py).
"""
