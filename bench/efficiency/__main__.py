"""`python -m bench.efficiency ...`: the efficiency suite (bench/efficiency/runner.py)."""

import sys

from bench.efficiency.runner import main

sys.exit(main())
