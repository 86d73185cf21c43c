"""measures: what a trial's numbers mean: objectives, request time, energy, the rule "faster", the ranking,
the baseline's stored evidence (the order: autoresearch/__init__.py).
"""
