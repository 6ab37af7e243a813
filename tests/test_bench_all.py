"""``specvoice bench all``: every result file the README cites has exactly one job, every job's command line is
accepted by the real command-line parsers, and the runner reports failures without losing committed results.
No model loads: the parsers are stopped right after they parse, and the runner is tested with stand-in commands."""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

import bench.all as ball

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def readme_result_files() -> set[str]:
    """File names of the result JSONs the README cites: ``bench/results/X.json``, and a bare ``X.json`` in code
    quotes that names a file in bench/results (the README shortens a second file of the same folder)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    names = set(re.findall(r"bench/results/([\w.\-]+\.json)", text))
    names |= {n for n in re.findall(r"`([\w.\-]+\.json)`", text) if (RESULTS / n).exists()}
    return names


def test_readme_cites_result_files():
    names = readme_result_files()
    assert "asr_stream.json" in names and "assist_cascade.json" in names, names


def test_every_cited_result_has_exactly_one_job():
    outputs = Counter(j.output for j in ball.JOBS)
    for name in sorted(readme_result_files()):
        assert outputs[name] == 1, f"{name} is produced by {outputs[name]} jobs"


def test_every_committed_result_has_a_job():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an unpacked release): which results are committed is unknown")
    tracked = subprocess.run(["git", "ls-files", "bench/results/*.json"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    assert tracked, "git lists no committed result"
    outputs = {j.output for j in ball.JOBS}
    # a GPU's results (bench/results/gpu/<device>/) come from the GPU suite or the split codec-TTS run
    from bench import gpu_codec_tts, gpu_suite

    gpu_outputs = {j["output"] for j in gpu_suite.jobs()} | {"device.json"} | set(gpu_codec_tts.OUTPUTS.values())
    missing = [p for p in tracked if Path(p).name not in (gpu_outputs if Path(p).parts[2:3] == ("gpu",) else outputs)]
    assert not missing, f"committed results no job regenerates: {missing}"


def test_jobs_are_unique_and_complete():
    assert len(set(ball.job_names())) == len(ball.JOBS)
    assert len({j.output for j in ball.JOBS}) == len(ball.JOBS)
    for j in ball.JOBS:
        assert j.output.endswith(".json") and "/" not in j.output
        assert j.estimate_s > 0 and j.slow == (j.estimate_s > 600)
        assert j.tool in ("specvoice", "pytest")
        if j.report:
            assert ball.SCRATCH in j.argv and ball.OUT not in j.argv
        elif j.tool == "pytest":
            assert j.argv[-2:] == ("--results-json", ball.OUT)
        else:
            assert j.argv[-2:] == ("--out", ball.OUT)


def test_list_prints_every_command(capsys):
    assert ball.main(["--list"]) == 0
    out = capsys.readouterr().out
    for j in ball.JOBS:
        assert j.name in out
        assert j.command(ball._show(ball.DEFAULT_OUT)) in out


def test_dry_run_prints_commands_and_runs_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ball, "run_job", lambda *a: pytest.fail("a dry run ran a job"))
    assert ball.main(["--dry-run", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for j in ball.JOBS:
        assert j.command(tmp_path) in out
    assert not any(tmp_path.iterdir())


def test_skip_slow_and_only(capsys):
    assert ball.main(["--dry-run", "--skip-slow"]) == 0
    out = capsys.readouterr().out
    for j in ball.JOBS:
        assert (f"\n{j.name}  →" in out) != j.slow
    fast = [j.name for j in ball.JOBS if not j.slow][:2]
    assert ball.main(["--list", "--only", *fast]) == 0
    out = capsys.readouterr().out
    assert "2 job(s)" in out and all(n in out for n in fast)


def test_only_unknown_name_is_a_clear_error(capsys):
    with pytest.raises(SystemExit) as e:
        ball.main(["--only", "asr", "no-such-job"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unknown job(s) no-such-job" in err and "asr-stream" in err


class _Parsed(Exception):
    def __init__(self, ns):
        self.ns = ns


SPECVOICE_JOBS = [j for j in ball.JOBS if j.tool == "specvoice"]


@pytest.mark.parametrize("job", SPECVOICE_JOBS, ids=ball.job_names(SPECVOICE_JOBS))
def test_job_command_line_is_accepted(job, tmp_path, monkeypatch):
    """The job's argv goes through ``specvoice``'s own parser and the benchmark module's (found through the CLI's
    BENCHES table); parsing stops there, before anything loads."""
    from app import cli
    from engine.config import load_config

    original = argparse.ArgumentParser.parse_args

    def stop_after_parse(self, args=None, namespace=None):
        ns = original(self, args, namespace)
        if getattr(ns, "cmd", None) == "bench":  # the CLI's own parse: let it hand over to the benchmark
            return ns
        raise _Parsed(ns)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", stop_after_parse)
    if job.bench:
        assert job.bench in cli.BENCHES, f"no benchmark {job.bench!r} in app.cli.BENCHES"
    with pytest.raises(_Parsed) as e:
        cli.main(job.args(tmp_path / job.output, tmp_path))
    ns = e.value.ns
    assert Path(ns.out) == (tmp_path / job.output if not job.report else tmp_path)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", original)
    if getattr(ns, "set", None):
        load_config(None, None, ns.set)  # every --set names a real setting with a valid value
    for f in getattr(ns, "files", None) or []:
        assert (ROOT / f).exists() or ("*" in f and list(ROOT.glob(f))), f  # a file, or a pattern that matches
    if getattr(ns, "stream", None):
        assert (ROOT / ns.stream).exists(), ns.stream


def test_method_names_exist():
    from bench import asr_bench, asr_stream_bench
    from engine.asr.draft_model_speculative import SPEC_METHODS

    known = {
        "asr": set(asr_bench.SSD_METHODS) | {"ar", "ar_ct2"} | set(SPEC_METHODS),
        "asr-stream": set(asr_stream_bench.METHODS),
    }
    for j in ball.JOBS:
        if j.bench in known and "--methods" in j.argv:
            methods = j.argv[j.argv.index("--methods") + 1].split(",")
            assert set(methods) <= known[j.bench], (j.name, set(methods) - known[j.bench])


def _slow_marked_tests() -> set[str]:
    """Names of the test functions in tests/ that carry ``pytest.mark.slow`` (as a decorator, or the module's
    ``pytestmark``), read from the source."""
    def is_slow(node) -> bool:
        return "mark.slow" in ast.unparse(node)

    names = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module_slow = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                          and is_slow(n.value) for n in tree.body)
        for n in ast.walk(tree):
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test_") and (
                    module_slow or any(is_slow(d) for d in n.decorator_list)):
                names.add(n.name)
    return names


def test_tests_slow_job_collects_every_slow_marked_test(tmp_path):
    """The tests-slow job's own command line, collect-only: pytest accepts it (the --results-json option included),
    it selects exactly the slow-marked tests (the default run's ``-m 'not slow'`` is overridden), and it writes its
    JSON."""
    (job,) = [j for j in ball.JOBS if j.name == "tests-slow"]
    assert job.tool == "pytest" and not job.report and job.slow
    out = tmp_path / job.output
    r = subprocess.run([sys.executable, *job.entry, *job.args(out, tmp_path), "--collect-only", "-q"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    collected = {line.split("::")[-1].split("[")[0] for line in r.stdout.splitlines() if "::" in line}
    want = _slow_marked_tests()
    assert "test_one_hour_of_speech" in want
    assert collected == want, (collected ^ want)
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["markers"] == "slow" and doc["exit_status"] == 0 and doc["tests"] == [] and not doc["passed"]
    assert doc["command"] == "python -m pytest -m slow --collect-only -q"  # not the scratch path


def test_results_json_records_each_outcome(tmp_path):
    """tests/conftest.py's --results-json on a sample suite: a pass, a failure, a skip and a fixture error, each
    with its reason; the counts and pytest's exit status."""
    (tmp_path / "conftest.py").write_text("from tests.conftest import (pytest_addoption, pytest_runtest_logreport,  "
                                          "# noqa: F401\n    pytest_sessionfinish, pytest_sessionstart)\n")
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n\n"
        "def test_ok():\n    pass\n\n"
        "def test_bad():\n    assert 1 == 2, 'one is not two'\n\n"
        "@pytest.mark.skip(reason='not today')\ndef test_skipped():\n    pass\n\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('the fixture broke')\n\n"
        "def test_error(broken):\n    pass\n")
    out = tmp_path / "results.json"
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--results-json", str(out),
                        str(tmp_path)], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(out.read_text(encoding="utf-8"))
    tests = {t["id"].split("::")[-1]: t for t in doc["tests"]}
    assert {k: t["outcome"] for k, t in tests.items()} == {
        "test_ok": "passed", "test_bad": "failed", "test_skipped": "skipped", "test_error": "error"}
    assert "one is not two" in tests["test_bad"]["reason"] and tests["test_ok"]["reason"] == ""
    assert "not today" in tests["test_skipped"]["reason"] and "the fixture broke" in tests["test_error"]["reason"]
    assert doc["counts"] == {"passed": 1, "failed": 1, "error": 1, "skipped": 1}
    assert doc["exit_status"] == 1 and doc["passed"] is False and doc["machine"]["cpu_count"] >= 1


_STAND_IN = r"""
import pathlib, sys
a = sys.argv[1:]
if "fail" in a:
    sys.exit(3)
out = pathlib.Path(a[a.index("--results-json" if "--results-json" in a else "--out") + 1])
target = out / "assist-report.json" if "assist" in a else out
target.write_text('{"new": true}')
"""


def test_failing_job_is_reported_and_the_rest_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ball, "ENTRY", ["-c", _STAND_IN])
    monkeypatch.setattr(ball, "PYTEST_ENTRY", ["-c", _STAND_IN.replace('"new"', '"tests"')])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    jobs = (
        ball.Job("good", "good.json", ("bench", "x", "--out", ball.OUT), 1),
        ball.Job("bad", "bad.json", ("bench", "fail", "--out", ball.OUT), 1),
        ball.Job("report", "report.json", ("assist", "--out", ball.SCRATCH), 1, report="assist-report.json"),
        ball.Job("slow", "slow.json", ("bench", "x", "--out", ball.OUT), 3600),
        ball.Job("tests", "tests.json", ("-m", "slow", "--results-json", ball.OUT), 1, tool="pytest"),
        ball.Job("tests-fail", "tests_fail.json", ("fail", "--results-json", ball.OUT), 1, tool="pytest"),
    )
    monkeypatch.setattr(ball, "JOBS", jobs)
    out = tmp_path / "results"
    out.mkdir()
    (out / "bad.json").write_text('{"committed": true}')
    assert ball.main(["--out", str(out), "--skip-slow"]) == 1
    assert (out / "good.json").read_text() == '{"new": true}'
    assert (out / "report.json").read_text() == '{"new": true}'
    assert (out / "bad.json").read_text() == '{"committed": true}'  # a failed job replaces nothing
    assert (out / "tests.json").read_text() == '{"tests": true}'  # the pytest job ran pytest's entry, not specvoice's
    assert sorted(p.name for p in out.iterdir()) == ["bad.json", "good.json", "report.json", "tests.json"]
    cap = capsys.readouterr()
    assert "bad failed (exit 3)" in cap.err
    table = cap.out[cap.out.index("job "):]
    rows = {line.split()[0]: line for line in table.splitlines()[2:]}
    assert "ok" in rows["good"] and "failed (exit 3)" in rows["bad"] and "ok" in rows["report"]
    assert "skipped (slow)" in rows["slow"] and "ok" in rows["tests"] and "failed (exit 3)" in rows["tests-fail"]
    assert "$ python -m pytest -m slow --results-json " in cap.out
    kept = sorted(scratch.glob("specvoice-bench-*"))  # the failed jobs' scratch folders stay for inspection
    assert [p.name.rsplit("-", 1)[0] for p in kept] == ["specvoice-bench-bad", "specvoice-bench-tests-fail"]
    assert all(str(k) in cap.err for k in kept)  # successful jobs leave no scratch behind
    assert ball.main(["--out", str(out), "--only", "good"]) == 0


def test_module_runs_as_a_script():
    r = subprocess.run([sys.executable, "-m", "bench.all", "--list", "--only", "asr"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "specvoice bench asr --methods" in r.stdout
