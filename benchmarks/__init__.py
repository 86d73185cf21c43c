"""One-off measurements of the server itself, beside the loop: they import serving and bench, and
nothing imports them.

    python -m benchmarks.overhead --model DIR     # the HTTP server's cost over a direct Generator
"""
