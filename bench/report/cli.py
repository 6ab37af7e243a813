"""Write docs/benchmarks.md and the README's results block from the committed benchmark JSON (bench/results/).

    python -m bench.report            write docs/benchmarks.md and the block between the README's markers
    python -m bench.report --check    write nothing; exit 1 when either file differs from what would be written

Raises (from :func:`main`):
    FileNotFoundError: a result file a section needs is missing.
    KeyError: a result file lacks a field a table needs (the benchmark's output format changed).
"""

from __future__ import annotations

import argparse
import sys

from bench.report.document import render_benchmarks
from bench.report.readme import render_readme_block, update_readme
from bench.report.results import DOC, README, RESULTS, ROOT, Results


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` compare) docs/benchmarks.md and the README block. Returns 0, or 1 when ``--check``
    finds a difference."""
    ap = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated file differs")
    ap.add_argument("--results", default=str(RESULTS), help="folder of the result JSONs (default: bench/results)")
    a = ap.parse_args(argv)
    res = Results(a.results)
    doc = render_benchmarks(res)
    readme = update_readme(README.read_text(encoding="utf-8"), render_readme_block(res))
    stale = []
    for path, text in ((DOC, doc), (README, readme)):
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if old != text:
            stale.append(path)
            if not a.check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
    if a.check and stale:
        for p in stale:
            print(f"{p.relative_to(ROOT)} differs from what `python -m bench.report` writes", file=sys.stderr)
        return 1
    for p in stale:
        print(f"wrote {p.relative_to(ROOT)}")
    return 0
