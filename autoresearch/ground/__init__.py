"""ground: the run's plan, the Optuna study and what ranks it, the results store, errors, outcomes, stage
names, servers, where report and export read and write (the order: autoresearch/__init__.py).
"""
