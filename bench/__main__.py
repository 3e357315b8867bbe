"""python -m bench (make bench): see bench/run.py for what it measures and the BENCH_* settings."""

import sys

from bench.run import main

sys.exit(main())
