"""Benchmarks of the async query service ("prove it"): one command, ``python -m bench.run``.

See ``bench/README.md`` for what each figure measures and how.
"""
