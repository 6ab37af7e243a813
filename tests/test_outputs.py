"""What the user keeps is right: transcript and caption files on their own audio's clock, exports of one session
(the latest by default) that carry the whole conversation and parse as SRT/VTT, flags checked as their settings
are, a quiet console that shows the results only, the fast clock labelled, and ``specvoice app`` without a
display."""

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import srt
import webvtt

from app import cli
from app.export import to_srt, to_txt, to_vtt
from engine.core.events import (
    AnswerDone,
    Caption,
    FinalTranscript,
    RevisedTranscript,
    SpeechEnded,
)
from engine.journal import Journal, JournalWriter, read_journal

from .conftest import QUESTION, ROOT, run_cli

STAMP = re.compile(r"^\[(\d+\.\d\d)-(\d+\.\d\d)\] (.*)$")


def _sessions_of(path: Path) -> list[list[tuple[float, float, str]]]:
    """The timed lines of a transcript file, per ``# session`` header."""
    out: list[list[tuple[float, float, str]]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# session "):
            out.append([])
        elif m := STAMP.match(line):
            assert out, f"a timed line before any session header: {line!r}"
            out[-1].append((float(m[1]), float(m[2]), m[3]))
    return out


def _secs(td) -> float:
    return td.total_seconds()


def parse_srt(text: str) -> list[srt.Subtitle]:
    """SubRip parsed by ``srt`` (strict: junk between cues raises), numbered 1.. in order, times increasing."""
    subs = list(srt.parse(text))
    assert [s.index for s in subs] == list(range(1, len(subs) + 1))
    assert all(s.start < s.end for s in subs) and all(a.end <= b.start for a, b in zip(subs, subs[1:]))
    assert all(s.content.strip() and "\n\n" not in s.content for s in subs)
    return subs


VTT_TIME = r"\d\d:\d\d:\d\d\.\d{3}"


def parse_vtt(text: str) -> list:
    """WebVTT parsed by ``webvtt-py``, and checked block by block against the format: the ``WEBVTT`` header, then
    blank-line separated NOTE blocks and cues (a timing line, then text lines with no ``-->`` and ``<``/``&``
    escaped)."""
    blocks = text.rstrip("\n").split("\n\n")
    assert blocks[0] == "WEBVTT", blocks[0]
    for b in blocks[1:]:
        lines = b.split("\n")
        if lines[0].startswith("NOTE"):
            assert "-->" not in b, b
            continue
        assert re.fullmatch(rf"{VTT_TIME} --> {VTT_TIME}", lines[0]), b
        assert len(lines) >= 2 and all(ln.strip() and "-->" not in ln for ln in lines[1:]), b
        assert not re.search(r"&(?!amp;|lt;|gt;)|<", "\n".join(lines[1:])), b
    caps = list(webvtt.from_string(text))
    assert len(caps) == sum(not b.startswith("NOTE") for b in blocks[1:])
    return caps


def _vtt_s(stamp: str) -> float:
    h, m, s = stamp.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


# -- 1. transcripts on the file's clock, the latest session exported, --quiet, --fast labelled ----------------------
def test_two_transcribe_runs_start_at_the_files_first_word(tmp_path, jfk_path):
    out = tmp_path / "out"
    runs = []
    for quiet in (False, True):
        r = run_cli(["transcribe", str(jfk_path), "--fast", "--out", str(out), "--set", "asr.model_role=asr_draft"]
                    + (["--quiet"] if quiet else []))
        assert r.returncode == 0, r.stderr
        runs.append(r)
    sessions = _sessions_of(out / "transcribe-transcript.txt")
    assert len(sessions) == 2 and all(sessions)
    for lines in sessions:  # each run on the file's own clock: the first word is spoken at ≈ 0.1-0.3 s
        assert lines[0][0] == pytest.approx(sessions[0][0][0], abs=0.3) and lines[0][0] < 1.0, lines
        assert all(a <= b for a, b, _ in lines) and lines[-1][1] <= 12.5
    header = (out / "transcribe-transcript.txt").read_text(encoding="utf-8").splitlines()[0]
    assert str(jfk_path) in header  # it names the audio it heard

    # --quiet: the transcript, and nothing else (no stamps, statuses, summary or report line)
    quiet = runs[1].stdout.splitlines()
    assert quiet and all(re.match(r"you( \(revised\))?: \S", ln) for ln in quiet), quiet
    assert " ".join(t for _, _, t in sessions[1]).split()[0] in quiet[0]
    # --fast: the report and the summary say the latencies are not real-time
    rep = json.loads((out / "transcribe-report.json").read_text())
    assert rep["clock"] == "fast (not real time)" and rep["realtime"] is False
    loud = runs[0].stdout
    assert "[fast (not real time)]" in next(ln for ln in loud.splitlines() if "end of speech" in ln)
    assert "not comparable with real-time runs" in loud

    # export: the latest session only, on its own clock; --session all: both, one after the other
    records = read_journal(out / "journal.jsonl")
    ids = [r["session"] for r in records if r["type"] == "session"]
    assert len(ids) == 2
    r = run_cli(["export", str(tmp_path / "latest.srt"), "--out", str(out)])
    assert r.returncode == 0 and ids[1] in r.stdout, r.stderr
    latest = parse_srt((tmp_path / "latest.srt").read_text(encoding="utf-8"))
    assert latest and _secs(latest[0].start) < 1.0 and _secs(latest[-1].end) <= 12.5
    r = run_cli(["export", str(tmp_path / "both.vtt"), "--out", str(out), "--session", "all"])
    assert r.returncode == 0, r.stderr
    both = parse_vtt((tmp_path / "both.vtt").read_text(encoding="utf-8"))
    second = [c for c in both if _vtt_s(c.start) >= 12.5]  # the first run heard 11 s of speech + 1 s of silence
    assert len(second) == len(latest) and len(both) > len(latest)
    assert (tmp_path / "both.vtt").read_text(encoding="utf-8").count("NOTE session") == 2


def test_live_files_are_timed_on_the_sessions_clock_and_a_revision_shows_its_whole_span(tmp_path, capsys):
    """Live's files and console for a session that is not the journal's first (its continuous clock would start
    late): times are the session's own; a revision that changed utterances 0 and 1 of a window that also decoded
    utterance 2 shows all three."""
    j = Journal(tmp_path / "journal.jsonl")
    earlier = j.start("transcribe", "earlier.wav")
    earlier.user(0, "Something earlier.", 0.5, 20.0)
    earlier.end(21.0)
    session = j.start("caption", "talk.wav")
    assert session.offset_s > 20  # what the files were wrongly timed on
    live = object.__new__(cli.Live)
    live.args = SimpleNamespace(cmd="caption", to="de")
    live.printer, live.out = cli.Printer(quiet=False), tmp_path
    live.texts, live.spans, live._headed = {}, {}, set()
    live.journal, live.session = session, SimpleNamespace(source=SimpleNamespace(name="talk.wav"))
    finals = [FinalTranscript(0, "And so my fellow Americans", (), 0.12, 2.5),
              FinalTranscript(1, "ask not what your country can do for you,", (), 2.9, 5.4),
              FinalTranscript(2, "ask what you can do for your country.", (), 6.0, 10.8)]
    for f in finals:
        live.show(f)
    live.show(Caption(0, finals[0].text, "Und so, meine Mitbürger", "", True, 0.1))
    live.show(RevisedTranscript((0, 1), ("And so, my fellow Americans,", "ask not what your country can do for you."),
                                (), 0.0, 10.8, "en"))
    (lines,) = _sessions_of(tmp_path / "caption-transcript.txt")
    assert [(a, b) for a, b, _ in lines] == [(0.12, 2.5), (2.9, 5.4), (6.0, 10.8)]
    captions = (tmp_path / "caption.txt").read_text(encoding="utf-8")
    assert captions.startswith(f"# session {session.id} (caption): talk.wav")
    assert "[0.12-2.50] And so my fellow Americans\n\tUnd so, meine Mitbürger" in captions
    shown = capsys.readouterr().out
    assert ("you (revised): And so, my fellow Americans, ask not what your country can do for you. ask what you can "
            "do for your country.") in shown


def test_quiet_console_prints_results_only(capsys):
    live = object.__new__(cli.Live)
    live.args, live.printer = SimpleNamespace(cmd="assist", to=""), cli.Printer(quiet=True)
    live.texts, live.spans = {}, {}
    live.append_text = lambda name, text: None
    from engine.core.events import AnswerSentence, PartialTranscript, Status

    for ev in (Status("models ready"), PartialTranscript(0, "what is ", "the", 0.0, 1.0),
               FinalTranscript(0, "What is the time?", (), 0.2, 1.4), AnswerSentence(0, 0, "It is noon."),
               AnswerSentence(0, 1, "Anything else?"), AnswerDone(0, "It is noon. Anything else?")):
        live.show(ev)
    assert capsys.readouterr().out.splitlines() == ["you: What is the time?", "assistant: It is noon. Anything else?"]


# -- 2. exports of the conversation --------------------------------------------------------------------------------
def _conversation_journal(path: Path) -> tuple[str, str]:
    """A journal with a caption session, then an assist session written as the session engine writes it (the
    JournalWriter, with the answer's audio timed when it played). Returns the two session ids."""
    j = Journal(path)
    cap = JournalWriter(j.start("caption", "jfk.flac"))
    for ev in (FinalTranscript(0, "And so my fellow Americans", (), 0.3, 2.5),
               Caption(0, "And so my fellow Americans", "Und so, meine lieben", " Amerikaner", True, 0.2),
               RevisedTranscript((0,), ("And so, my fellow Americans,",), (), 0.0, 2.5)):
        cap.note(ev)
        cap.write(ev)
    cap.journal.end(11.0)
    talk = JournalWriter(j.start("assist", "question.wav"))
    for ev in (SpeechEnded(0, 3.1, wall=100.0),
               FinalTranscript(0, "What should I do <today> & tomorrow?", (), 0.4, 3.1),
               RevisedTranscript((0,), ("What should I do today and tomorrow?",), (), 0.0, 3.2)):
        talk.note(ev)
        talk.write(ev)
    talk.spoken(0, 1.5, wall=101.2)  # the answer's audio went to the player 1.2 s after the end of speech
    talk.spoken(0, 2.0, wall=102.7)
    talk.write(AnswerDone(0, "Rest today & plan <tomorrow>."))
    talk.journal.end(4.0)
    return cap.journal.id, talk.journal.id


def test_an_assist_session_exports_alone_with_its_answer_timed_when_spoken(tmp_path, capsys):
    path = tmp_path / "journal.jsonl"
    cap_id, talk_id = _conversation_journal(path)
    answer = next(r for r in read_journal(path) if r["type"] == "assistant")
    assert (answer["t_start"], answer["t_end"]) == (pytest.approx(4.3), pytest.approx(7.8))
    for fmt in ("srt", "vtt", "txt"):
        assert cli.main(["export", str(tmp_path / f"x.{fmt}"), "--journal", str(path)]) == 0
    assert talk_id in capsys.readouterr().out
    subs = parse_srt((tmp_path / "x.srt").read_text(encoding="utf-8"))
    assert [s.content for s in subs] == ["You: What should I do today and tomorrow?",
                                         "Assistant: Rest today & plan <tomorrow>."]
    assert [(_secs(s.start), _secs(s.end)) for s in subs] == [(0.4, 3.1), (4.3, 7.8)]
    vtt_text = (tmp_path / "x.vtt").read_text(encoding="utf-8")
    caps = parse_vtt(vtt_text)
    assert [html.unescape(c.text) for c in caps] == [s.content for s in subs]
    assert "Assistant: Rest today &amp; plan &lt;tomorrow&gt;." in vtt_text  # escaped as WebVTT cue text
    assert [(c.start, c.end) for c in caps] == [("00:00:00.400", "00:00:03.100"), ("00:00:04.300", "00:00:07.800")]
    assert f"NOTE session {talk_id} (assist" in vtt_text and "question.wav" in vtt_text
    txt = (tmp_path / "x.txt").read_text(encoding="utf-8").splitlines()
    assert txt == [txt[0], "[00:00:00.400] You: What should I do today and tomorrow?",
                   "[00:00:04.300] Assistant: Rest today & plan <tomorrow>."]
    assert txt[0].startswith(f"# session {talk_id} (assist") and "question.wav" in txt[0]
    assert cap_id not in "".join(txt) and "Americans" not in vtt_text


def test_a_caption_session_exports_source_revised_and_translation_in_every_format(tmp_path):
    path = tmp_path / "journal.jsonl"
    cap_id, _ = _conversation_journal(path)
    records = read_journal(path)
    (sub,) = parse_srt(to_srt(records, cap_id))
    assert sub.content == "And so, my fellow Americans,\nUnd so, meine lieben Amerikaner"  # revised; no label
    (cue,) = parse_vtt(to_vtt(records, cap_id))
    assert cue.text == sub.content and (cue.start, cue.end) == ("00:00:00.300", "00:00:02.500")
    assert "[00:00:00.300] Caption: And so, my fellow Americans,\n    → Und so, meine lieben Amerikaner" in to_txt(
        records, cap_id)
    # every session, one after the other on one clock
    assert cli.main(["export", str(tmp_path / "all.srt"), "--journal", str(path), "--session", "all"]) == 0
    subs = parse_srt((tmp_path / "all.srt").read_text(encoding="utf-8"))
    assert len(subs) == 3 and _secs(subs[1].start) >= 11.0
    assert cli.main(["export", str(tmp_path / "n.srt"), "--journal", str(path), "--session", "nope"]) == 2


# -- 3. flags through their settings' checks -----------------------------------------------------------------------
def test_to_klingon_is_refused_like_its_setting(tmp_path, jfk_path):
    r = run_cli(["caption", str(jfk_path), "--to", "klingon", "--fast", "--out", str(tmp_path)])
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("specvoice: error: --to klingon: caption.target_language:"), err
    s = run_cli(["caption", str(jfk_path), "--set", "caption.target_language=klingon", "--out", str(tmp_path)])
    assert s.returncode == 2 and err[0].split("caption.target_language:")[1] == s.stderr.strip().split(
        "caption.target_language:")[1]
    args = cli.parser().parse_args(["caption", "x.wav", "--to", "French"])
    assert cli.config_from_args(args).caption.target_language == "French"


# -- 4. the desktop app without a display --------------------------------------------------------------------------
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a display server is a Linux (X11/Wayland) matter")
def test_app_without_a_display_is_one_line_and_exit_2():
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    r = subprocess.run([sys.executable, "-m", "app.cli", "app"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 2, (r.returncode, r.stderr)
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "no display" in err[0] and "QT_QPA_PLATFORM=offscreen" in err[0], err
    from app.desktop_check import check_display

    assert check_display({}) and check_display({"QT_QPA_PLATFORM": "xcb", "WAYLAND_DISPLAY": "wayland-0"})
    for env in ({"DISPLAY": ":0"}, {"WAYLAND_DISPLAY": "wayland-0"}, {"QT_QPA_PLATFORM": "offscreen"},
                {"QT_QPA_PLATFORM": "minimal"}, {"QT_QPA_PLATFORM": "wayland;xcb", "DISPLAY": ":1"}):
        assert check_display(env) is None, env


def test_assist_export_after_a_real_session_holds_that_session_and_its_answer(tmp_path, small_gguf):
    """``specvoice assist`` into a journal that already holds a session, then ``specvoice export x.srt``."""
    journal = tmp_path / "journal.jsonl"
    old = Journal(journal).start("transcribe", "earlier.wav")
    old.user(0, "An earlier session.", 0.3, 1.5)
    old.end(2.0)
    r = run_cli(["assist", str(QUESTION), "--fast", "--no-play", "--out", str(tmp_path), "--journal", str(journal),
                 "--model", f"llm_target={small_gguf}", "--set", "asr.model_role=asr_draft",
                 "--set", "llm.max_answer_tokens=40"])
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "assist-report.json").read_text())
    (ans,) = rep["answers"]
    r = run_cli(["export", str(tmp_path / "x.srt"), "--journal", str(journal)])
    assert r.returncode == 0, r.stderr
    subs = parse_srt((tmp_path / "x.srt").read_text(encoding="utf-8"))
    said = [s for s in subs if s.content.startswith("You: ")]
    answered = [s for s in subs if s.content.startswith("Assistant: ")]
    assert said and len(answered) == 1 and "earlier" not in "".join(s.content for s in subs)
    assert " ".join(answered[0].content.split()[1:]) == " ".join(ans["answer"].split())
    assert answered[0].start >= said[0].start and _secs(said[0].start) < 2.0  # the question's own clock
