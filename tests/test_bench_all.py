"""``specvoice bench all``: every result file the README cites has exactly one job, every job's command line is
accepted by the real command-line parsers, and the runner reports failures without losing committed results.
No model loads: the parsers are stopped right after they parse, and the runner is tested with stand-in commands."""

from __future__ import annotations

import argparse
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
    try:
        tracked = subprocess.run(["git", "ls-files", "bench/results/*.json"], cwd=ROOT, capture_output=True,
                                 text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    outputs = {j.output for j in ball.JOBS}
    missing = [p for p in tracked if Path(p).name not in outputs]
    assert not missing, f"committed results no job regenerates: {missing}"


def test_jobs_are_unique_and_complete():
    assert len(set(ball.job_names())) == len(ball.JOBS)
    assert len({j.output for j in ball.JOBS}) == len(ball.JOBS)
    for j in ball.JOBS:
        assert j.output.endswith(".json") and "/" not in j.output
        assert j.estimate_s > 0 and j.slow == (j.estimate_s > 600)
        if j.report:
            assert ball.SCRATCH in j.argv and ball.OUT not in j.argv
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


@pytest.mark.parametrize("job", ball.JOBS, ids=ball.job_names())
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


_STAND_IN = r"""
import pathlib, sys
a = sys.argv[1:]
if "fail" in a:
    sys.exit(3)
out = pathlib.Path(a[a.index("--out") + 1])
target = out / "assist-report.json" if "assist" in a else out
target.write_text('{"new": true}')
"""


def test_failing_job_is_reported_and_the_rest_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ball, "ENTRY", ["-c", _STAND_IN])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    jobs = (
        ball.Job("good", "good.json", ("bench", "x", "--out", ball.OUT), 1),
        ball.Job("bad", "bad.json", ("bench", "fail", "--out", ball.OUT), 1),
        ball.Job("report", "report.json", ("assist", "--out", ball.SCRATCH), 1, report="assist-report.json"),
        ball.Job("slow", "slow.json", ("bench", "x", "--out", ball.OUT), 3600),
    )
    monkeypatch.setattr(ball, "JOBS", jobs)
    out = tmp_path / "results"
    out.mkdir()
    (out / "bad.json").write_text('{"committed": true}')
    assert ball.main(["--out", str(out), "--skip-slow"]) == 1
    assert (out / "good.json").read_text() == '{"new": true}'
    assert (out / "report.json").read_text() == '{"new": true}'
    assert (out / "bad.json").read_text() == '{"committed": true}'  # a failed job replaces nothing
    assert sorted(p.name for p in out.iterdir()) == ["bad.json", "good.json", "report.json"]
    cap = capsys.readouterr()
    assert "bad failed (exit 3)" in cap.err
    table = cap.out[cap.out.index("job "):]
    rows = {line.split()[0]: line for line in table.splitlines()[2:]}
    assert "ok" in rows["good"] and "failed (exit 3)" in rows["bad"] and "ok" in rows["report"]
    assert "skipped (slow)" in rows["slow"]
    kept = list(scratch.glob("specvoice-bench-bad-*"))  # the failed job's scratch folder stays for inspection
    assert len(kept) == 1 and str(kept[0]) in cap.err
    assert [p.name for p in scratch.iterdir()] == [kept[0].name]  # successful jobs leave no scratch behind
    assert ball.main(["--out", str(out), "--only", "good"]) == 0


def test_module_runs_as_a_script():
    r = subprocess.run([sys.executable, "-m", "bench.all", "--list", "--only", "asr"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "specvoice bench asr --methods" in r.stdout
