"""The session engine (engine/session.py) on the real small Whisper and real speech: what it journals is on disk
before its consumer sees it, its metrics are typed and physically consistent, push-to-talk ends the utterance at
the release, and a bad input or mode fails before anything runs."""

import threading

import pytest

from audio.io import AudioError
from audio.sources import ArraySource
from engine.config import Config
from engine.core.events import (AsrMetrics, FinalTranscript, RevisedTranscript, SpeechEnded, Status, TurnMetrics)
from engine.journal import read_journal
from engine.runtime import Runtime
from engine.session import Session, SessionOptions

from .conftest import JFK_TEXT, normalized_wer


@pytest.fixture(scope="module")
def rt():
    # the small Whisper keeps the module fast; everything else is the product's configuration
    return Runtime(Config().with_overrides({"asr": {"model_role": "asr_draft"}}), progress=False)


def _source(audio, realtime=False):
    return ArraySource(audio, Config().audio.block_s, realtime=realtime, trailing_silence_s=1.0)


def test_each_final_and_revision_is_journaled_before_the_consumer_sees_it(rt, jfk_audio, tmp_path):
    journal = tmp_path / "journal.jsonl"
    seen, on_disk = [], []

    def on_event(ev):
        seen.append(ev)
        if isinstance(ev, (FinalTranscript, RevisedTranscript)):
            on_disk.append((ev, [r for r in read_journal(journal) if r["type"] in ("user", "revision")]))

    session = Session(rt.cfg, rt, SessionOptions(mode="transcribe"), on_event, journal=journal,
                      source=_source(jfk_audio))
    result = session.run()
    finals = [ev for ev in seen if isinstance(ev, FinalTranscript) and ev.text]
    assert finals and normalized_wer(JFK_TEXT, " ".join(f.text for f in finals)) <= 0.2
    for ev, records in on_disk:
        if isinstance(ev, FinalTranscript) and ev.text:
            assert records[-1]["type"] == "user" and records[-1]["text"] == ev.text
        elif isinstance(ev, RevisedTranscript):
            assert records[-1]["type"] == "revision" and records[-1]["texts"] == list(ev.texts)
    records = read_journal(journal)
    assert records[0]["type"] == "session" and records[0]["command"] == "transcribe"
    assert records[-1]["type"] == "session_end" and records[-1]["status"] == "ok"
    assert records[-1]["audio_s"] == pytest.approx(result.transcriber.stats.audio_s, abs=1e-3)


def test_metrics_are_typed_and_within_their_physical_range(rt, jfk_audio):
    seen = []
    session = Session(rt.cfg, rt, SessionOptions(mode="transcribe"), seen.append, source=_source(jfk_audio))
    session.run()
    ends = {ev.utterance: ev for ev in seen if isinstance(ev, SpeechEnded)}
    finals = {ev.utterance: ev for ev in seen if isinstance(ev, FinalTranscript)}
    speeds = [ev for ev in seen if isinstance(ev, AsrMetrics) and ev.eos_to_final_s is not None]
    assert {m.utterance for m in speeds} == set(finals) & set(ends)
    audio_s = len(jfk_audio) / 16000 + 1.0
    for m in speeds:  # the final comes after its end of speech, and no later than the whole file took to decode
        assert m.eos_to_final_s == pytest.approx(finals[m.utterance].wall - ends[m.utterance].wall)
        assert 0.0 <= m.eos_to_final_s <= audio_s and 0.0 < m.rtf < 1.0
    turns = [ev for ev in seen if isinstance(ev, TurnMetrics)]
    # one end-of-turn decision per utterance, each ended by the configured silence (no end-of-turn model)
    assert sorted(t.utterance for t in turns) == sorted(ends)
    assert all(t.rule == "vad" and t.by == "silence" and t.silence_s == rt.cfg.vad.min_silence_s for t in turns)
    assert isinstance(seen[-1], Status) and seen[-1].text.startswith("stopped after")


def test_a_stream_that_ends_inside_the_silence_dates_the_end_of_speech_by_its_audio(rt, jfk_audio):
    # "And so my fellow Americans" and 0.5 s of silence, shorter than the VAD's 0.6 s: the end of the stream closes
    # the utterance, and its end of speech is when the audio of the speech's end was there, not the stream's end
    audio = jfk_audio[: int(2.4 * 16000)]
    source = ArraySource(audio, Config().audio.block_s, realtime=True, trailing_silence_s=0.5)
    seen = []
    Session(rt.cfg, rt, SessionOptions(mode="transcribe"), seen.append, source=source).run()
    ends = [ev for ev in seen if isinstance(ev, SpeechEnded)]
    assert len(ends) == 1 and ends[0].decided_wall is not None
    audio_end = len(audio) / 16000 + 0.5
    spoken_end = ends[0].t - rt.cfg.vad.speech_pad_s  # ``t`` holds the VAD's pad after the last speech sample
    # the wall clock runs with the real-time audio: the decision (the stream's end) came the silence's length after
    assert ends[0].decided_wall - ends[0].wall == pytest.approx(audio_end - spoken_end, abs=0.15)
    assert ends[0].decided_wall - ends[0].wall > 0.4


def test_push_to_talk_ends_the_utterance_at_the_release(rt, jfk_audio):
    seen = []
    session = Session(rt.cfg, rt, SessionOptions(mode="transcribe", push_to_talk=True), seen.append,
                      source=_source(jfk_audio, realtime=True))
    # released after "And so my fellow Americans" (2.4 s into the file): the rest is never heard
    threading.Timer(3.0, session.release_talk).start()
    result = session.run()
    finals = [ev for ev in seen if isinstance(ev, FinalTranscript)]
    assert len(finals) == 1 and "americans" in finals[0].text.lower() and "country" not in finals[0].text.lower()
    assert result.transcriber.stats.audio_s < 5.0
    (turn,) = [ev for ev in seen if isinstance(ev, TurnMetrics)]
    assert turn.rule == "push_to_talk" and turn.by == "released"


def test_a_bad_input_or_mode_fails_before_anything_runs(rt, tmp_path):
    bad = tmp_path / "empty.wav"
    bad.write_bytes(b"")
    journal = tmp_path / "journal.jsonl"
    with pytest.raises(AudioError):
        Session(rt.cfg, rt, SessionOptions(mode="transcribe", source=bad), print, journal=journal)
    assert not journal.exists()  # nothing was started, so nothing was journaled
    with pytest.raises(ValueError, match="mode"):
        Session(rt.cfg, rt, SessionOptions(mode="dictate"), print, source=_source([0.0] * 16000))


def test_an_assist_session_answers_journals_then_writes_each_answer_to_its_wav(rt, small_gguf, tmp_path):
    """The embedded spoken question through the whole session: the answer's sentences and the answer are on disk
    before the consumer sees them, and its audio (no loudspeaker) goes to one WAV per answer, sample for sample."""
    import numpy as np
    import soundfile as sf

    from engine.core.events import AnswerAudio, AnswerDone, AnswerSaved, AnswerSentence, SpokenAnswerMetrics

    from .conftest import QUESTION

    cfg = rt.cfg.with_overrides({"models": {"llm_target": str(small_gguf)}, "llm": {"max_answer_tokens": 40}})
    journal = tmp_path / "journal.jsonl"
    seen, unjournaled = [], []

    def on_event(ev):
        seen.append(ev)
        if isinstance(ev, (AnswerSentence, AnswerDone)):
            kind = "answer_sentence" if isinstance(ev, AnswerSentence) else "assistant"
            if not any(r["type"] == kind and r["text"] == ev.text for r in read_journal(journal)):
                unjournaled.append(ev)

    options = SessionOptions(mode="assist", source=QUESTION, realtime=False, play=False, wav_dir=tmp_path,
                             wav_per_answer=True)
    result = Session(cfg, Runtime(cfg, progress=False), options, on_event, journal=journal).run()
    done = [ev for ev in seen if isinstance(ev, AnswerDone)]
    assert len(done) == 1 and len(done[0].text.split()) >= 3 and unjournaled == []
    audio = np.concatenate([ev.samples for ev in seen if isinstance(ev, AnswerAudio)])
    (saved,) = [ev for ev in seen if isinstance(ev, AnswerSaved)]
    assert saved.utterance == done[0].utterance and seen.index(saved) > seen.index(done[0])
    wav, sr = sf.read(saved.path, dtype="float32")
    assert sr == 22050 and len(wav) == len(audio) and saved.seconds == pytest.approx(len(audio) / sr)
    assert np.abs(wav - audio).max() < 1e-3  # 16-bit PCM of the same samples
    (m,) = [ev for ev in seen if isinstance(ev, SpokenAnswerMetrics)]
    assert 0.0 < m.ttfs_s <= m.first_audio_s and result.answers[0]["answer"] == done[0].text
    # the question is on disk before any of its answer
    kinds = [r["type"] for r in read_journal(journal)]
    assert kinds.index("user") < kinds.index("answer_sentence") < kinds.index("assistant")


def test_a_journal_that_cannot_be_written_is_reported_once_and_the_session_goes_on(rt, jfk_audio, tmp_path):
    from engine.core.events import Error

    journal = tmp_path / "journal.jsonl"
    seen = []
    session = Session(rt.cfg, rt, SessionOptions(mode="transcribe"), seen.append, journal=journal,
                      source=_source(jfk_audio))
    journal.unlink()
    journal.mkdir()  # the journal's place is taken: every append fails from now on
    session.run()
    errors = [ev for ev in seen if isinstance(ev, Error)]
    assert len(errors) == 1 and errors[0].where == "journal" and "goes on" in errors[0].message
    finals = [ev.text for ev in seen if isinstance(ev, FinalTranscript) and ev.text]
    assert normalized_wer(JFK_TEXT, " ".join(finals)) <= 0.2  # everything was still heard and shown
