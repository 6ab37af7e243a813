"""``python -m bench.report [--check] [--results DIR]``: see :mod:`bench.report.cli`."""

from bench.report.cli import main

raise SystemExit(main())
