"""champion: the champion made servable: minimization, its gate, exports to our server and TabbyAPI (the
order: autoresearch/__init__.py).
"""
