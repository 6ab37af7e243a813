"""The user-facing docs: docs/benchmarks.md and the README's results table are exactly what bench/report/ makes of
the committed JSON (a number changes only with its file), the README stays short and keeps its two set-up commands,
every relative link and anchor resolves, every module path the architecture names exists, and each paper module
names its paper as docs/references.md does."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from bench import report

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
RESULTS = ROOT / "bench" / "results"
SETUP_COMMANDS = (
    'python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e ".[llm-target]" && .venv/bin/specvoice assist',
    'python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e ".[test]" && .venv/bin/python -m pytest',
)
PAPER_MODULES = {  # module → arXiv id of its paper
    "engine/asr/ctc_self_speculative.py": "2603.11243",
    "engine/asr/draft_model_speculative.py": "2507.18181",
    "engine/answer/predictive.py": "2506.15556",
    "engine/translate/biased_retranslation.py": "2509.21740",
    "engine/synthesis/coarse_grained_sampling.py": "2511.13732",
}


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_benchmarks_doc_is_generated_from_the_committed_json():
    committed = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    assert report.render_benchmarks(report.Results(RESULTS)) == committed, \
        "docs/benchmarks.md is stale: run `python -m bench.report`"


def test_readme_results_block_is_generated_from_the_committed_json():
    text = README.read_text(encoding="utf-8")
    block = report.render_readme_block(report.Results(RESULTS))
    assert block in text, "the README's results table is stale: run `python -m bench.report`"
    assert text.count(report.BEGIN) == 1 and text.count(report.END) == 1


def test_check_passes_on_the_committed_tree():
    assert report.main(["--check"]) == 0


def test_a_number_changes_with_its_file(tmp_path):
    """Change one measured value in a copy of the results: the docs follow it, and --check reports the difference
    (nothing is written)."""
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    voice = json.loads((results / "voice.json").read_text(encoding="utf-8"))
    old = voice["methods"]["predgen"]["eos_to_first_audio_s_p50"]
    voice["methods"]["predgen"]["eos_to_first_audio_s_p50"] = 9.876
    (results / "voice.json").write_text(json.dumps(voice), encoding="utf-8")

    before = report.render_benchmarks(report.Results(RESULTS))
    after = report.render_benchmarks(report.Results(results))
    assert "9.88 s" in after and "9.88 s" not in before
    assert f"{old:.2f}" in before
    assert "**9.88 s**" in report.render_readme_block(report.Results(results))

    doc_before = (DOCS / "benchmarks.md").read_bytes()
    assert report.main(["--check", "--results", str(results)]) == 1
    assert (DOCS / "benchmarks.md").read_bytes() == doc_before


def test_every_result_file_has_a_section_and_its_command():
    """Each committed result file is read by a named section (not the generic fallback) and cited with the command
    of the bench/all.py job that regenerates it."""
    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    for path in sorted(RESULTS.glob("*.json")):
        job = report.job_for(path.name)
        assert f"`bench/results/{path.name}` — `specvoice bench all --only {job.name}`" in text, path.name
        assert f"## Other results: `{path.name}`" not in text, f"{path.name} has no section in bench/report/"


def test_readme_is_short_and_keeps_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    for cmd in SETUP_COMMANDS:
        assert f"```bash\n{cmd}\n```" in text, cmd
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert SETUP_COMMANDS[1] in ci, ".ci/run no longer runs the README's test command"


def _anchors(md: str) -> set[str]:
    """GitHub's anchors for the headings of ``md``."""
    out = set()
    in_code = False
    for line in md.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and re.match(r"#{1,6} ", line):
            out.add(report.anchor(line.lstrip("#").strip()))
    return out


@pytest.mark.parametrize("md", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(md):
    text = md.read_text(encoding="utf-8")
    text_wo_code = re.sub(r"```.*?```", "", text, flags=re.S)
    links = re.findall(r"\]\(([^)\s]+)\)", text_wo_code)
    assert links, f"{md.name} has no links"
    for link in links:
        if re.match(r"[a-z]+://", link) or link.startswith("mailto:"):
            continue
        target, _, anchor = link.partition("#")
        path = (md.parent / target).resolve() if target else md
        assert path.exists(), f"{md.name}: {link} → {path} does not exist"
        if anchor:
            assert anchor in _anchors(path.read_text(encoding="utf-8")), f"{md.name}: no heading for #{anchor}"


def test_module_paths_named_by_the_docs_exist():
    """Every repository path the architecture (and the other docs) name in code quotes exists: a moved module makes
    this fail instead of leaving a stale layout in the docs."""
    pattern = re.compile(r"`((?:app|engine|audio|tts|bench|assets|tests|packaging)/[\w./-]*)`")
    for md in _markdown_files():
        for path in pattern.findall(md.read_text(encoding="utf-8")):
            if path.startswith("bench/results/") or "<" in path:
                continue
            assert (ROOT / path).exists() or list(ROOT.glob(path)), f"{md.name} names {path}, which does not exist"


def test_paper_modules_name_their_paper():
    refs = (DOCS / "references.md").read_text(encoding="utf-8")
    for module, arxiv in PAPER_MODULES.items():
        doc = (ROOT / module).read_text(encoding="utf-8").split('"""')[1]
        head = " ".join(doc.split("\n\n")[0].split())  # the docstring's first paragraph, unwrapped
        assert f"https://arxiv.org/abs/{arxiv}" in head, module
        title = re.search(r'"([^"]+)"', head).group(1)
        assert title in " ".join(refs.split()), f"{module}: {title!r} is not in docs/references.md"
        assert f"arXiv:{arxiv}" in refs and f"`{module}`" in refs, module
