"""`python -m bench.efficiency ...`: the efficiency suite (bench/efficiency/runner.py)."""

import contextlib
import sys

from bench.efficiency.runner import main

with contextlib.suppress(KeyboardInterrupt):
    sys.exit(main())
