"""Write docs/benchmarks.md and the README's results block from the committed benchmark JSON (bench/results/).

    python -m bench.report            write docs/benchmarks.md and the block between the README's markers
    python -m bench.report --check    write nothing; exit 1 when either file differs from what would be written

Every number in the generated text is read from a result file (or a committed JSON next to a model, such as
``assets/codec_tts/stages_before.json``) at generation time: a number in the docs changes only when its file does.
The command that produces each file is taken from :mod:`bench.all` (the job that regenerates it), so the docs
and ``specvoice bench all`` cannot disagree. Which row is the product's default is read from
:class:`engine.config.Config`.

Output is deterministic: the same JSON files give byte-identical Markdown (tests/test_docs.py checks the committed
files against it).

Modules: :mod:`~bench.report.results` (reading the result files), :mod:`~bench.report.markdown` (numbers and
tables), one module of sections per stage (:mod:`~bench.report.voice`, :mod:`~bench.report.caption`,
:mod:`~bench.report.asr`, :mod:`~bench.report.conversation`, :mod:`~bench.report.sessions`,
:mod:`~bench.report.tts`, :mod:`~bench.report.gpu`), :mod:`~bench.report.document` (the page in order),
:mod:`~bench.report.readme` (the README block) and :mod:`~bench.report.cli` (the command).

Raises (from :func:`main`):
    FileNotFoundError: a result file a section needs is missing.
    KeyError: a result file lacks a field a table needs (the benchmark's output format changed).
"""

from bench.report.cli import main
from bench.report.document import SECTIONS, render_benchmarks
from bench.report.markdown import anchor
from bench.report.readme import BEGIN, END, render_readme_block, update_readme
from bench.report.results import DOC, README, RESULTS, ROOT, Results, job_for

__all__ = ["BEGIN", "DOC", "END", "README", "RESULTS", "ROOT", "SECTIONS", "Results", "anchor", "job_for", "main",
           "render_benchmarks", "render_readme_block", "update_readme"]
