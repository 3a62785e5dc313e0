"""`python -m search ...` is `hpsearch ...` (workers spawn themselves this way)."""

from search.commands import entry_point

entry_point()
