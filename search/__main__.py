"""`python -m search ...` is `hpsearch ...` (workers spawn themselves this way)."""

import sys

from search.cli import main

sys.exit(main())
