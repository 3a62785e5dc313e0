"""`python -m search ...` is `hpsearch ...` (workers spawn themselves this way)."""

from search.commands.cli import entry_point

entry_point()
