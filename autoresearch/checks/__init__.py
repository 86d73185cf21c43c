"""checks: what a trial and the finalists both ask: drift, the task tier, its judging and verdicts (the
order: autoresearch/__init__.py).
"""
