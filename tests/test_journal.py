"""The session journal: durable before shown (SIGKILL), sessions never erased, exports of every session on one clock;
the queue policy (stale partials may go, finals never)."""

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from app.export import cues, items, to_srt, to_txt
from engine.journal import SESSION_GAP_S, Journal, read_journal, session_offsets
from engine.core.events import FinalTranscript, PartialTranscript
from engine.pipeline import AudioQueue, EventQueue

from .conftest import QUESTION, ROOT, run_cli


def _start(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, encoding="utf-8")


def _read_until(p: subprocess.Popen, pattern: str, timeout: float) -> list[str]:
    """stdout lines up to and including the first that matches ``pattern`` (a reader thread: no blocking)."""
    lines: list[str] = []
    hit = threading.Event()

    def reader():
        for line in p.stdout:
            lines.append(line.rstrip("\n"))
            if re.search(pattern, line):
                hit.set()
                return

    threading.Thread(target=reader, daemon=True).start()
    assert hit.wait(timeout), lines
    return lines


def _shown(lines: list[str], prefix: str) -> list[str]:
    return [m.group(1).strip() for ln in lines if (m := re.search(rf"\] {prefix}: (.*)$", ln)) and m.group(1).strip()]


def test_sigkill_after_a_final_loses_nothing_shown(tmp_path, jfk_path):
    p = _start(["transcribe", str(jfk_path), "--out", str(tmp_path), "--set", "asr.model_role=asr_draft"])
    try:
        lines = _read_until(p, r"\] you: \S", timeout=180)
        p.send_signal(signal.SIGKILL)
        rest, _ = p.communicate(timeout=30)
    finally:
        p.kill()
    shown = _shown(lines + rest.splitlines(), "you")
    assert shown and p.returncode == -signal.SIGKILL
    records = read_journal(tmp_path / "journal.jsonl")
    journaled = [r["text"] for r in records if r["type"] == "user"]
    assert journaled[: len(shown)] == shown
    assert records[0]["type"] == "session" and not any(r["type"] == "session_end" for r in records)
    # the live transcript holds the same lines
    txt = (tmp_path / "transcribe-transcript.txt").read_text(encoding="utf-8")
    assert all(s in txt for s in shown)


def test_sigkill_mid_answer_loses_nothing_shown(tmp_path, small_gguf):
    p = _start(["assist", str(QUESTION), "--fast", "--no-play", "--out", str(tmp_path), "--model",
                f"llm_target={small_gguf}", "--set", "llm.answer_method=cascade", "--set", "asr.model_role=asr_draft"])
    try:
        lines = _read_until(p, r"\] assistant: \S", timeout=240)
        p.send_signal(signal.SIGKILL)
        rest, _ = p.communicate(timeout=30)
    finally:
        p.kill()
    lines += rest.splitlines()
    records = read_journal(tmp_path / "journal.jsonl")
    said = [r["text"] for r in records if r["type"] == "user"]
    answered = [r["text"] for r in records if r["type"] == "answer_sentence"]
    assert _shown(lines, "you") == said[: len(_shown(lines, "you"))] and said
    shown_answer = _shown(lines, "assistant")
    assert shown_answer and answered[: len(shown_answer)] == shown_answer


def test_a_second_session_keeps_the_first_and_exports_do_not_overlap(tmp_path, jfk_path):
    out = tmp_path / "out"
    for _ in range(2):
        r = run_cli(["transcribe", str(jfk_path), "--fast", "--quiet", "--out", str(out), "--set",
                     "asr.model_role=asr_draft"])
        assert r.returncode == 0, r.stderr
    records = read_journal(out / "journal.jsonl")
    sessions = [r["session"] for r in records if r["type"] == "session"]
    assert len(sessions) == 2 and len({r["session"] for r in records}) == 2
    finals = {s: [r["text"] for r in records if r["type"] == "user" and r["session"] == s] for s in sessions}
    assert finals[sessions[0]] and finals[sessions[0]] == finals[sessions[1]]
    lines = (out / "transcribe-transcript.txt").read_text(encoding="utf-8").splitlines()
    assert [ln for ln in lines if ln.startswith("# session ")] == [ln for ln in lines if not ln.startswith("[")]
    assert [ln.split()[2] for ln in lines if ln.startswith("# session ")] == sessions
    lines = [ln for ln in lines if ln.startswith("[")]
    assert len(lines) == 2 * len(finals[sessions[0]])
    # the live transcript is on each session's own clock: the second run's lines have the first run's times
    stamps = [tuple(map(float, re.match(r"\[([\d.]+)-([\d.]+)\]", ln).groups())) for ln in lines]
    half = len(stamps) // 2
    flat = [t for span in stamps for t in span]
    assert flat[2 * half:] == pytest.approx(flat[:2 * half], abs=0.3) and stamps[0][0] < 1.0
    for fmt in ("srt", "vtt", "txt"):  # every session, one after the other on one clock
        r = run_cli(["export", str(tmp_path / f"all.{fmt}"), "--out", str(out), "--session", "all"])
        assert r.returncode == 0, r.stderr
    srt = (tmp_path / "all.srt").read_text(encoding="utf-8")
    spans = [(_secs(a), _secs(b)) for a, b in re.findall(r"(\d\d:\d\d:\d\d,\d{3}) --> (\d\d:\d\d:\d\d,\d{3})", srt)]
    assert len(spans) == 2 * len(finals[sessions[0]])
    assert all(a < b for a, b in spans) and all(n[0] >= p[1] for p, n in zip(spans, spans[1:]))
    assert spans[len(spans) // 2][0] >= 12.0  # the second session starts after the first one's 12 s
    assert (tmp_path / "all.vtt").read_text(encoding="utf-8").startswith("WEBVTT")
    assert (tmp_path / "all.txt").read_text(encoding="utf-8").count("# session") == 2
    r = run_cli(["export", str(tmp_path / "one.srt"), "--out", str(out), "--session", sessions[0]])
    assert r.returncode == 0 and (tmp_path / "one.srt").read_text(encoding="utf-8").startswith("1\n00:00:0")
    r = run_cli(["export", str(tmp_path / "latest.srt"), "--out", str(out)])  # the latest session, its own clock
    assert r.returncode == 0 and (tmp_path / "latest.srt").read_text(encoding="utf-8").startswith("1\n00:00:0")
    assert len(re.findall(" --> ", (tmp_path / "latest.srt").read_text(encoding="utf-8"))) == len(spans) // 2
    r = run_cli(["export", str(tmp_path / "x.doc"), "--out", str(out)])
    assert r.returncode == 2 and r.stderr.count("\n") == 1


def _secs(stamp: str) -> float:
    h, m, s = stamp.replace(",", ".").split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def test_journal_clock_killed_sessions_and_torn_lines(tmp_path):
    j = Journal(tmp_path / "j.jsonl")
    a = j.start("transcribe", "a.wav")
    a.user(0, "Première phrase.", 0.5, 2.0)
    a.user(1, "Zweiter Satz.", 2.0, 2.0)  # a cue without duration
    # a killed session: no session_end, a torn last line
    with open(j.path, "a", encoding="utf-8") as f:
        f.write('{"type": "user", "session": "')
    b = j.start("caption", "b.wav")
    assert b.offset_s == pytest.approx(2.0 + SESSION_GAP_S)
    b.user(0, "Third one.", 0.2, 1.0)
    b.caption(0, "Third one.", "Der dritte.", 0.2, 1.0)
    b.end(audio_s=5.0)
    c = j.start("transcribe", "c.wav")
    assert c.offset_s == pytest.approx(b.offset_s + 5.0 + SESSION_GAP_S)
    records = read_journal(j.path)
    assert [r["type"] for r in records].count("session") == 3
    offs = session_offsets(records)
    assert list(offs.values()) == [0.0, b.offset_s, c.offset_s]
    cs = cues(items(records))
    assert [t for _, _, t in cs] == ["Première phrase.", "Zweiter Satz.", "Third one.\nDer dritte."]
    assert all(x[0] < x[1] <= y[0] for x, y in zip(cs, cs[1:]))
    assert cs[2][0] == pytest.approx(b.offset_s + 0.2)
    assert "Der dritte." in to_srt(records) and "Première" in to_txt(records)
    text = (tmp_path / "j.jsonl").read_bytes().decode("utf-8")
    assert "Première" in text  # UTF-8, not \\u escapes


def test_event_queue_drops_stale_partials_never_finals():
    q = EventQueue(maxsize=3)
    parts = [PartialTranscript(0, f"p{i} ", "", 0.0, 0.0) for i in range(3)]
    for p in parts:
        assert q.put(p)
    final = FinalTranscript(0, "done", (), 0.0, 1.0)
    assert q.put(final)  # the oldest partial made room
    assert q.dropped == 1
    assert not q.put(PartialTranscript(0, "late ", "", 0.0, 0.0)) or q.dropped == 2
    got = [q.get(timeout=1) for _ in range(len(q))]
    assert final in got and parts[0] not in got
    # a full queue of finals: the producer waits until the consumer takes one
    q2 = EventQueue(maxsize=1)
    q2.put(final)
    put_done, put_result = threading.Event(), []

    def producer():
        put_result.append(q2.put(FinalTranscript(1, "two", (), 1.0, 2.0)))
        put_done.set()

    threading.Thread(target=producer, daemon=True).start()
    assert not put_done.wait(0.3)  # still waiting for room (a slower machine only makes it wait longer)
    assert q2.get(timeout=10) is final
    assert put_done.wait(60) and put_result == [True] and q2.dropped == 0  # room made: in, nothing dropped
    assert q2.get(timeout=1).text == "two"
    q2.close()  # the consumer is gone: nobody waits any more
    assert not q2.put(FinalTranscript(2, "three", (), 2.0, 3.0))


def test_audio_queue_is_bounded_in_seconds_and_never_drops():
    q = AudioQueue(capacity_s=1.0)
    assert q.put("a", 0.6) and not q.put("b", 0.6, timeout=0.05)  # full: the producer waits, nothing dropped
    assert q.put(("start", 0.0), 0.0, timeout=0.0)  # boundaries always fit
    assert q.get() == "a" and q.put("b", 0.6, timeout=0.05) and q.seconds == pytest.approx(0.6)
    assert [q.get(), q.get()] == [("start", 0.0), "b"]


def test_asr_that_falls_behind_catches_up_and_says_so():
    """A real-time source and a backend slower than real time at first: Backlog events, no audio lost."""
    import dataclasses

    import numpy as np

    from audio.sources import ArraySource
    from engine.core.events import Word
    from engine.pipeline import Backlog
    from engine.asr.backend import BackendResult
    from engine.asr.transcriber import StreamingTranscriber
    from engine.config import Config

    class SlowThenFast:
        name = "slow"

        def __init__(self):
            self.calls = 0
            self.seen_s = 0.0

        def transcribe(self, audio, prompt=""):
            self.calls += 1
            self.seen_s = max(self.seen_s, len(audio) / 16000)
            time.sleep(2.0 if self.calls <= 2 else 0.0)
            return BackendResult([Word(0.0, 0.4, " hello")], [0.4], {})

    events = []
    be = SlowThenFast()
    src = ArraySource(np.zeros(16000 * 6, np.float32), block_s=0.1, realtime=True, trailing_silence_s=0.0)
    st = StreamingTranscriber(src, be, None, events.append,  # no second pass: the slow decoder has no window decode
                              dataclasses.replace(Config().asr, min_chunk_s=0.5, revise_max_s=0.0), lag_warn_s=1.0)
    stats = st.run()
    backlog = [e for e in events if isinstance(e, Backlog)]
    assert backlog and not backlog[0].caught_up and backlog[0].behind_s > 1.0
    assert any(e.caught_up for e in backlog)  # it caught up once the decoder was fast again
    assert stats.audio_s == pytest.approx(6.0) and stats.dropped_audio_s == 0.0
    assert stats.max_backlog_s >= backlog[0].behind_s
    assert be.seen_s == pytest.approx(6.0, abs=0.05)  # every second of audio reached the decoder
    assert [e.text for e in events if isinstance(e, FinalTranscript)] == ["hello"]
