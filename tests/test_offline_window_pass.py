"""The second pass as offline Whisper (``asr.revise_mode = "offline"``): the stream re-decoded in consecutive 30 s
windows from a seek position, as faster-whisper's long-form transcription moves through a recording. The
bookkeeping on scripted window decodes; the revised text against faster-whisper's offline transcript with real
Whisper base on real audio longer than one window."""

import dataclasses

import numpy as np
import pytest

from engine.asr.backend import BackendResult
from engine.asr.offline_window_pass import OfflineWindowPass
from engine.core.events import FinalTranscript, RevisedTranscript, Word

from .conftest import ROOT, normalized_wer
from .test_asr_context import U, W

HESITATION = ROOT / "tests" / "data" / "hesitation_en.flac"


class ScriptedWindows:
    """Each call returns the next scripted window decode: (words in stream time, seek in stream time, guard)."""

    def __init__(self, script):
        self.script = list(script)
        self.calls = []

    def transcribe_window(self, audio, prompt_tokens=(), language=None, last=False):
        t0, words, seek, guard = self.script.pop(0)
        self.calls.append({"seconds": len(audio) / 16000, "prompt": list(prompt_tokens), "language": language,
                           "last": last})
        rel = [Word(w.start - t0, w.end - t0, w.text) for w in words]
        toks = [hash(w.text) % 1000 for w in words]
        return BackendResult(rel, [], {"seek_s": seek - t0, "prompt_tokens": toks, "language": language or "en",
                                       "guard": guard, "doubtful": bool(guard)})


AUDIO = np.zeros(90 * 16000, np.float32)


def _run(sp):
    job = sp.take()
    return sp.apply(job, sp.decode(job, AUDIO, 0.0))


def test_a_window_waits_for_its_30_s_and_settles_the_utterances_before_the_next_seek_position():
    u0, u1, u2 = U(0, "we could probably", 1.0), U(1, "skip the remove all part", 12.0), U(2, "and when what", 27.0)
    dec = ScriptedWindows([
        (0.0, W("we could probably", 1.0) + W("skip the removal part", 12.0) + W("and", 27.0), 27.4, ""),
        (27.4, W("then what", 27.4) + W("okay", 40.0), 90.0, ""),
    ])
    sp = OfflineWindowPass(dec)
    for u in (u0, u1, u2):
        sp.add(u)
    assert not sp.due(30.5)  # the window's 30 s and the 1 s margin are not all heard yet
    assert sp.due(31.2) and sp.window == (0.0, 30.0)
    rev = _run(sp)
    assert dec.calls[0]["prompt"] == [] and not dec.calls[0]["last"]
    assert sp.seek == pytest.approx(27.4)  # the next window starts where the decode's settled segments ended
    # utterances 0 and 1 ended before the seek position: revised; utterance 2 goes on into the next window
    assert [(i, t) for i, t, _ in rev.changed] == [(1, "skip the removal part")]
    assert [u.index for u in sp.pending] == [2]
    sp.add(U(3, "okay", 40.0))
    assert not sp.due(50.0)
    assert sp.due(None)  # the end of the stream: the rest, every segment kept
    rev = _run(sp)
    assert dec.calls[1]["last"] and dec.calls[1]["prompt"] == [hash(w.text) % 1000 for w in
                                                                W("we could probably", 1.0)
                                                                + W("skip the removal part", 12.0) + W("and", 27.0)]
    assert [(i, t) for i, t, _ in rev.changed] == [(2, "and then what")]  # "okay" unchanged: not a revision
    assert not sp.pending and not sp.due(None)


def test_thirty_seconds_without_an_utterance_are_skipped_without_a_decode():
    dec = ScriptedWindows([(60.0, W("hello there", 70.0), 90.0, "")])
    sp = OfflineWindowPass(dec)
    sp.add(U(0, "hello their", 70.0))
    assert not sp.due(62.0)  # 0–30 and 30–60 hold no utterance: skipped; 60–90 is not heard yet
    assert sp.seek == pytest.approx(60.0) and not dec.calls
    assert sp.due(None)
    assert [(i, t) for i, t, _ in _run(sp).changed] == [(0, "hello there")]


def test_a_language_change_ends_the_window_and_restarts_the_prompt():
    dec = ScriptedWindows([(0.0, W("good morning", 0.5), 30.0, ""), (4.0, W("guten morgen", 5.0), 90.0, "")])
    sp = OfflineWindowPass(dec)
    sp.add(U(0, "good morning", 0.5))
    sp.add(U(1, "gute morgen", 5.0, language="de"))
    assert sp.due(None)
    assert sp.window == (0.0, pytest.approx((0.5 + 0.7 + 5.0) / 2))  # between the two utterances
    assert _run(sp) is None  # the English utterance's text did not change
    assert dec.calls[0]["language"] == "en" and dec.calls[0]["last"]
    assert sp.due(None)
    rev = _run(sp)
    assert dec.calls[1]["language"] == "de" and dec.calls[1]["prompt"] == []  # no English prompt for German
    assert [(i, t) for i, t, _ in rev.changed] == [(1, "guten morgen")]


def test_a_looping_window_revises_nothing_and_the_prompt_restarts_after_it():
    dec = ScriptedWindows([(0.0, W("yes yes yes yes yes yes", 1.0), 27.0, "loop"),
                           (27.0, W("fine", 32.0), 90.0, "")])
    sp = OfflineWindowPass(dec)
    sp.add(U(0, "yes I think so", 1.0))
    sp.add(U(1, "fine", 32.0))
    assert sp.due(31.5)
    assert _run(sp) is None and sp.pending == [sp.pending[0]] and sp.pending[0].index == 1
    assert sp.dropped == 1
    assert sp.due(None)
    _run(sp)
    assert dec.calls[1]["prompt"] == []


# -- real Whisper base -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rt():
    from engine.config import Config
    from engine.runtime import Runtime

    return Runtime(Config(), progress=False)


def test_the_revised_transcript_of_a_stream_longer_than_one_window_is_the_offline_transcript(rt, jfk_audio,
                                                                                           tmp_path):
    """jfk, a sentence with a hesitation pause and jfk twice more (46 s of speech and pauses) streamed through the
    VAD: the second pass (the default) decodes the first 30 s window while the stream goes on and the rest at its
    end, as offline faster-whisper moves through the recording, and the revised transcript is the offline greedy
    transcript of the same recording."""
    import soundfile as sf
    from faster_whisper import WhisperModel

    from audio.io import load_audio
    from audio.sources import FileSource

    assert rt.cfg.asr.revise_mode == "offline"
    gap = np.zeros(int(1.5 * 16000), np.float32)
    audio = np.concatenate([jfk_audio, gap, load_audio(HESITATION), gap, jfk_audio, gap, jfk_audio]
                           ).astype(np.float32)
    path = tmp_path / "long.flac"
    sf.write(path, audio, 16000)
    evs = []
    st = rt.transcriber(FileSource(path, realtime=False), evs.append)
    st.run()
    assert st.second.runs >= 2  # a window during the stream, the rest at its end
    revised = " ".join(t for t in st.texts.values() if t)
    final = " ".join(e.text for e in evs if isinstance(e, FinalTranscript) and e.text)
    model = WhisperModel(str(rt.model(rt.cfg.asr.model_role).path), device="cpu", compute_type="int8")
    segs, _ = model.transcribe(audio, language="en", beam_size=1, temperature=0.0, vad_filter=False,
                               word_timestamps=True)
    offline = " ".join(s.text for s in segs)
    assert normalized_wer(offline, revised) <= 0.02, (offline, revised)
    assert normalized_wer(offline, revised) <= normalized_wer(offline, final)
    revs = [e for e in evs if isinstance(e, RevisedTranscript)]
    finals = {e.utterance: e for e in evs if isinstance(e, FinalTranscript)}
    for ev in revs:  # each revision follows the finals it revises, its words inside its window
        assert all(evs.index(finals[i]) < evs.index(ev) for i in ev.utterances)
        assert all(ev.t_start - 1e-6 <= w.start and w.end <= ev.t_end + 0.5 for w in ev.words)


def test_chains_mode_still_revises_a_hesitation(rt):
    from audio.sources import FileSource

    cfg = rt.cfg
    rt.cfg = dataclasses.replace(cfg, asr=dataclasses.replace(cfg.asr, revise_mode="chains"))
    try:
        evs = []
        st = rt.transcriber(FileSource(HESITATION, realtime=False), evs.append)
        st.run()
    finally:
        rt.cfg = cfg
    assert type(st.second).__name__ == "SecondPass" and st.second.runs >= 1
