"""`python -m search ...` is `hpsearch ...` (workers spawn themselves this way)."""

from search.program import entry_point

entry_point()
