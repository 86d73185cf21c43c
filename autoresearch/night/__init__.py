"""night: the night's schedule: the plan's arithmetic (forecast), the clock, the progress display (the
order: autoresearch/__init__.py).
"""
