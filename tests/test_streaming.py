"""Streaming ASR: LocalAgreement-2 commit policy, and the pipeline on real audio with real Whisper."""

import dataclasses

import jiwer
import pytest

from engine.config import Config
from engine.core.events import FinalTranscript, PartialTranscript, SpeechEnded, SpeechStarted, Word
from engine.asr.local_agreement import HypothesisBuffer
from engine.asr.online_processor import OnlineASRProcessor
from engine.asr.words import join_words

from .conftest import JFK_TEXT

ASR = Config().asr  # the product's settings: every processor and transcriber here is built from them


def asr(**overrides):
    """The product's ``asr`` settings with ``overrides`` (each test that overrides one says why)."""
    return dataclasses.replace(ASR, **overrides)


def W(words, t0=0.0, step=0.5):
    return [Word(t0 + i * step, t0 + i * step + 0.4, " " + w) for i, w in enumerate(words.split())]


def test_local_agreement_commits_the_common_prefix_of_two_hypotheses():
    hb = HypothesisBuffer()
    hb.insert(W("and so my"), 0)
    assert hb.flush() == []  # a single hypothesis commits nothing
    hb.insert(W("and so my fellow"), 0)
    assert [w.text for w in hb.flush()] == [" and", " so", " my"]
    hb.insert(W("and so my fellow americans ask"), 0)
    assert [w.text for w in hb.flush()] == [" fellow"]
    # a changed tail is not committed until two hypotheses agree
    hb.insert(W("and so my fellow americans asked"), 0)
    assert [w.text for w in hb.flush()] == [" americans"]
    assert [w.text for w in hb.complete()] == [" asked"]


def test_repeated_ngram_after_commit_is_dropped():
    hb = HypothesisBuffer()
    hb.committed_in_buffer = W("ask not")
    hb.last_committed_time = 0.9
    hb.insert([Word(0.95, 1.3, " not"), Word(1.4, 1.8, " what")], 0)
    assert [w.text for w in hb.new] == [" what"]


def test_a_final_decode_keeps_the_words_after_the_committed_text_even_when_timed_before_its_end():
    """A decode that re-hears the committed "for Saturday and" times the next word "the" 0.2 s before the committed
    end: by time alone it is dropped as committed, by the committed tail's text it is new. A repetition the speaker
    made ("and and") is kept too, and without the tail in the decode the time rule still applies."""
    committed = [Word(2.0, 2.4, " for"), Word(2.5, 3.0, " Saturday"), Word(3.1, 3.5, " and")]
    decode = [Word(1.9, 2.3, " for"), Word(2.4, 2.9, " Saturday"), Word(2.95, 3.2, " and"), Word(3.3, 3.5, " the"),
              Word(3.9, 4.3, " early")]
    texts = {}
    for align in (False, True):
        hb = HypothesisBuffer()
        hb.committed_in_buffer, hb.last_committed_time = list(committed), 3.5
        hb.insert(decode, 0.0, align_text=align)
        texts[align] = [w.text for w in hb.new]
    assert texts == {False: [" early"], True: [" the", " early"]}
    hb.insert(decode[:3] + [Word(3.3, 3.5, " and"), Word(3.9, 4.3, " early")], 0.0, align_text=True)
    assert [w.text for w in hb.new] == [" and", " early"]
    hb.insert([Word(3.3, 3.5, " the"), Word(3.9, 4.3, " early")], 0.0, align_text=True)
    assert [w.text for w in hb.new] == [" early"]  # no tail to align with: by time


class ScriptedBackend:
    """Replays fixed hypotheses (word lists); checks the processor's bookkeeping, not Whisper."""

    name = "scripted"

    def __init__(self, hyps, doubtful=()):
        self.hyps = list(hyps)
        self.doubtful = list(doubtful)  # per decode: whether it failed the guards even after the re-decodes

    def transcribe(self, audio, prompt=""):
        from engine.asr.backend import BackendResult

        words = self.hyps.pop(0) if len(self.hyps) > 1 else self.hyps[0]
        doubtful = self.doubtful.pop(0) if self.doubtful else False
        return BackendResult(words, [words[-1].end] if words else [], {"doubtful": doubtful})


def _feed(p, n, seconds=1.0):
    import numpy as np

    for _ in range(n):
        p.insert_audio_chunk(np.zeros(int(16000 * seconds), np.float32))
        p.process_iter()


def test_final_is_the_last_whole_utterance_decode_not_the_early_commits():
    """asr.final_full: words LocalAgreement-2 committed from short prefixes are replaced by the last decode of the
    whole utterance (it heard all of it); with final_full off they stay (whisper_streaming's rule)."""
    hyps = [W("net is not"), W("net is not your idea"), W("that is a good idea i will do that")]
    for full, want in ((True, "that is a good idea i will do that"), (False, "net is not good idea i will do that")):
        p = OnlineASRProcessor(ScriptedBackend(list(hyps)), asr(final_full=full))
        _feed(p, 3)
        assert p.text == "net is not"  # committed from the first two decodes
        p.finish(speech_end=3.0)
        assert p.text == want


def test_hypothesis_is_the_final_text_if_speech_ended_now():
    """What the caption translates by default: the text finish() would give if speech ended after this update (the
    latest whole-utterance decode), not the early commits the partial shows; with final_full off, or after a
    doubtful decode, it is the partial's committed + tentative text."""
    hyps = [W("net is not"), W("net is not your idea"), W("that is a good idea i will do that")]
    p = OnlineASRProcessor(ScriptedBackend(list(hyps)), ASR)
    assert p.hypothesis == ""
    _feed(p, 2)
    assert p.hypothesis == "net is not your idea"
    _feed(p, 1)
    shown = (" ".join(w.text.strip() for w in p.committed + p.hyp.complete()))
    assert shown.startswith("net is not") and p.hypothesis == "that is a good idea i will do that"
    before = p.hypothesis
    p.finish(speech_end=3.0)  # the latest decode covers the speech: no new decode
    assert p.final_decodes_skipped == 1 and p.text == before

    p = OnlineASRProcessor(ScriptedBackend(list(hyps)), asr(final_full=False))
    _feed(p, 3)
    assert p.hypothesis == " ".join(w.text.strip() for w in p.committed + p.hyp.complete())
    p = OnlineASRProcessor(ScriptedBackend(list(hyps), doubtful=[False, False, True]), ASR)
    _feed(p, 3)
    assert p.hypothesis == " ".join(w.text.strip() for w in p.committed + p.hyp.complete()) != hyps[2]


def test_a_partial_gives_the_speculative_stages_the_source_they_ask_for():
    from engine.config import Config

    ev = PartialTranscript(0, "amen ", "with a", 1.0, 0.0, hypothesis="a man with a")
    assert ev.source("hypothesis") == "a man with a" and ev.source("partial") == ev.text == "amen with a"
    assert PartialTranscript(0, "amen ", "with", 1.0, 0.0).source("hypothesis") == "amen with"  # none given
    with pytest.raises(ValueError, match="hypothesis"):
        ev.source("committed")
    assert Config().llm.predgen_source == Config().caption.source == "hypothesis"


def test_doubtful_decodes_commit_nothing_and_a_doubtful_utterance_keeps_only_agreed_words():
    """Decodes that failed the guards even after the re-decodes (babble, music) are shown but never commit words;
    when most of a short utterance's decodes were doubtful, its final keeps only words two decodes agreed on, not
    the last decode's guess. An utterance with a few doubtful decodes is final as usual, and so is one with at least
    DOUBTFUL_KEEP_S of audio (Whisper keeps low-log-prob text)."""
    guess = [W("on post song"), W("on post song is your next"), W("what is wrong with your head"),
             W("i am not a good person")]
    p = OnlineASRProcessor(ScriptedBackend(guess, doubtful=[True] * 4), ASR)
    _feed(p, 4, seconds=0.4)  # a burst of noise, 1.6 s
    assert p.text == "" and p.mostly_doubtful
    p.insert_audio_chunk(__import__("numpy").zeros(1600, "float32"))  # it went on after the last decode
    p.finish(speech_end=1.7)
    assert p.text == ""
    assert len(p.updates) == 4  # its words would not be kept: no final decode, the final comes at once
    speech = [W("please turn"), W("please turn the music"), W("please turn the music down"),
              W("please turn the music down a little")]
    p = OnlineASRProcessor(ScriptedBackend(speech, doubtful=[False, True, False, False]), ASR)
    _feed(p, 4)
    p.finish(speech_end=4.0)
    assert p.text == "please turn the music down a little"
    # unclear speech: the first decodes (a word or two) doubtful, the decode of the whole utterance confident
    p = OnlineASRProcessor(ScriptedBackend(speech[1:], doubtful=[True, True, False]), ASR)
    _feed(p, 3)
    assert not p.mostly_doubtful
    p.finish(speech_end=3.0)
    assert p.text == "please turn the music down a little"
    # seconds of speech Whisper scores below the log-prob floor (another language, noise): the latest decode stays
    guess = [W("je m'ouvre"), W("je m'ouvre une table"), W("je voudrais une table pour quatre")]
    p = OnlineASRProcessor(ScriptedBackend(guess, doubtful=[True] * 3), ASR)
    _feed(p, 3)
    assert p.committed == [] and not p.mostly_doubtful  # 3 s of audio: nothing committed, not dropped
    p.finish(speech_end=3.0)
    assert p.text == "je voudrais une table pour quatre"


def test_a_final_that_lost_its_words_to_the_acoustic_context_is_decoded_on_its_own_audio():
    """The previous utterance's audio heads the buffer as acoustic context (its words are not emitted again). When
    the decode of context + new audio gives no word after the context (here Whisper skipped the context's words and
    timed the new ones inside it), the utterance's own audio is decoded alone: its words are not lost. Speech
    shorter than OWN_AUDIO_MIN_S since the VAD heard it start (a backchannel, a filler) is not decoded again."""
    import numpy as np

    ctx = W("but somebody has to go to the shop")  # 0.0 .. 3.9 s
    for seconds, want, decodes in ((3.0, "i can go", 3), (0.5, "", 2)):
        be = ScriptedBackend([W("i can go", 0.5), W("i can go", 0.5), W("i can go", 0.1)])
        p = OnlineASRProcessor(be, ASR, context_words=ctx, committed_until=ctx[-1].end, t_offset=0.0,
                               speech_start=ctx[-1].end + 0.3)
        p.insert_audio_chunk(np.zeros(int((ctx[-1].end + seconds) * 16000), np.float32))
        p.process_iter()
        p.process_iter()
        p.finish(speech_end=ctx[-1].end + seconds)
        assert p.text == want and len(p.updates) == decodes
        assert p.own_audio_decodes == (decodes == 3)
        if want:
            assert p.committed[0].start >= ctx[-1].end  # in audio time, after the context


def test_a_final_that_writes_the_acoustic_context_again_is_decoded_on_its_own_audio():
    """Whisper, decoding the previous utterance's audio with the new, can write the context's words again and time
    them over the new audio, where no time or tail rule drops them. A final that opens with at least
    asr.context_repeat_words of the context's words in a row is decoded again on its own audio; two words of the
    context said again ("the numbers are fine") are not; when the own-audio decode gives nothing, the words after
    the repeated run are kept; with the check off (0) the repeated words stay."""
    import numpy as np

    ctx = W("the numbers in the second section look")  # 0.0 .. 3.4 s
    own = W("a bit low to me", 0.1)
    cases = [(3, "in the second section", own, "a bit low to me", 1),
             (0, "in the second section", own, "in the second section", 0),
             (3, "the numbers are fine", own, "the numbers are fine", 0),
             (3, "in the second section too low", [], "too low", 1)]
    for n, decoded, own_words, want, own_decodes in cases:
        rep = ctx + W(decoded, 3.8, 0.3)
        p = OnlineASRProcessor(ScriptedBackend([rep, rep, own_words]), asr(context_repeat_words=n),
                               context_words=ctx, committed_until=ctx[-1].end, speech_start=ctx[-1].end + 0.3)
        p.insert_audio_chunk(np.zeros(int((ctx[-1].end + 2.0) * 16000), np.float32))
        p.process_iter()
        p.process_iter()
        p.finish(speech_end=ctx[-1].end + 2.0)
        assert (p.text, p.own_audio_decodes) == (want, own_decodes), (n, decoded)


def test_only_the_decodes_that_may_give_the_final_text_are_redone_on_the_padded_window():
    """asr.partial_retry off: a streaming update's decode is asked not to redo a failed decode on the padded window
    (it commits nothing and the next update replaces it); the decode at a pause (the final text's) is; on: all are;
    asr.final_retry off: the final text's decode is not either."""

    class Recording(ScriptedBackend):
        supports_padded_retry = True  # its transcribe takes padded_retry

        def __init__(self, hyps):
            super().__init__(hyps)
            self.padded_retry = []

        def transcribe(self, audio, prompt="", padded_retry=True):
            self.padded_retry.append(padded_retry)
            return super().transcribe(audio, prompt)

    for partial_retry, final_retry, want in ((False, True, [False, False, True]), (True, True, [True, True, True]),
                                             (False, False, [False, False, False]),
                                             (True, False, [True, True, False])):
        be = Recording([W("turn"), W("turn the music"), W("turn the music down")])
        p = OnlineASRProcessor(be, asr(partial_retry=partial_retry, final_retry=final_retry))
        _feed(p, 2)
        p.insert_audio_chunk(__import__("numpy").zeros(16000, "float32"))
        p.process_iter(until=2.8)  # a VAD pause: the final text's decode
        p.finish(speech_end=2.8)
        assert be.padded_retry == want and p.text == "turn the music down"


def test_processor_finish_skips_decode_when_hypothesis_covers_speech():
    import numpy as np

    be = ScriptedBackend([W("hello there"), W("hello there friend")])
    p = OnlineASRProcessor(be, ASR)
    p.insert_audio_chunk(np.zeros(16000, np.float32))
    p.process_iter()
    p.insert_audio_chunk(np.zeros(16000, np.float32))
    p.process_iter()
    assert p.text == "hello there"
    p.finish(speech_end=1.5)
    assert p.text == "hello there friend" and p.final_decodes_skipped == 1


def test_a_committed_word_is_not_lost_when_a_later_decode_times_it_differently_at_a_trim():
    """The buffer is trimmed at a segment end of the latest decode, while the committed words carry the times of the
    decode that committed them: a committed word whose earlier end lies just past the cut ("merrier", 2.96 s vs a
    cut at 2.90 s) left the buffer with the audio before it and must stay in the final text (it was dropped, and the
    final decode of the trimmed buffer, which hears only its last bit, did not bring it back)."""
    import numpy as np

    from engine.asr.backend import BackendResult

    def ws(*items):
        return [Word(a, b, " " + t) for t, a, b in items]

    head = [("bring", 0.0, 0.3), ("her", 0.3, 0.6), ("along", 0.6, 1.2), ("the", 1.5, 1.7)]
    decodes = [
        (ws(*head[:2]), [0.6]),
        (ws(*head), [1.7]),
        (ws(*head, ("more", 1.7, 2.1), ("the", 2.1, 2.4), ("merrier", 2.5, 2.96)), [2.96]),
        (ws(*head, ("more", 1.7, 2.1), ("the", 2.1, 2.4), ("merrier", 2.5, 2.96), ("lumina", 3.3, 3.8)), [2.96, 3.8]),
        (ws(*head, ("more", 1.7, 2.1), ("the", 2.1, 2.4), ("merrier", 2.5, 2.9), ("lumina", 3.3, 3.8),
            ("a", 3.9, 4.0)), [2.9, 4.0]),
        # after the cut at 2.90 s (times relative to it): the clipped end of "merrier" is not heard again
        (ws(("lumina", 0.4, 0.9), ("a", 1.0, 1.1), ("melodious", 1.2, 1.8), ("language", 1.9, 2.6)), [2.6]),
    ]

    class Backend:
        name = "scripted"

        def transcribe(self, audio, prompt=""):
            words, ends = decodes.pop(0) if len(decodes) > 1 else decodes[0]
            return BackendResult(words, ends, {})

    # a short buffer (trimmed within the test's 6 s), without whole decodes, and no overlap (the buffer starts at the
    # cut)
    p = OnlineASRProcessor(Backend(), asr(buffer_trim_s=4.5, final_piece_s=0.0, trim_overlap_s=0.0))
    for _ in range(6):
        p.insert_audio_chunk(np.zeros(16000, np.float32))
        p.process_iter()
    assert p.buffer_time_offset == pytest.approx(2.9)  # trimmed once, at the latest decode's segment end
    assert "merrier" in p.prompt()  # the committed word that left the buffer is in the decoding prompt
    p.finish()
    assert p.text == "bring her along the more the merrier lumina a melodious language"


def test_the_words_that_leave_a_trimmed_buffer_keep_the_latest_decodes_text():
    """asr.trim_latest: LocalAgreement-2 commits "net in a good idea" from two short decodes; the decode whose segment
    end becomes the trim point heard the whole sentence and more, and says "imagine a good idea". The words that
    leave the buffer with the trim are final with that decode's text, and the partials' committed text shows it
    from the trim on (trim_latest off: the committed words stay)."""
    import numpy as np

    from engine.asr.backend import BackendResult

    def ws(*items):
        return [Word(a, b, " " + t) for t, a, b in items]

    wrong = [("net", 0.0, 0.3), ("in", 0.3, 0.5), ("a", 0.5, 0.6), ("good", 0.6, 0.9), ("idea.", 0.9, 1.4)]
    right = [("imagine", 0.0, 0.5), ("a", 0.5, 0.6), ("good", 0.6, 0.9), ("idea.", 0.9, 1.4)]
    tail = [("oh", 2.0, 2.3), ("nice.", 2.3, 2.9), ("bring", 3.2, 3.5), ("her", 3.5, 3.7), ("along.", 3.7, 4.4)]
    decodes = [
        (ws(*wrong[:3]), [0.6]),
        (ws(*wrong), [1.4]),
        (ws(*wrong, *tail[:2]), [1.4, 2.9]),
        (ws(*right, *tail[:2]), [1.4, 2.9]),
        (ws(*right, *tail), [1.4, 2.9, 4.4]),  # the trim: at 2.9 s, the end of "oh nice."
        # after the cut (times relative to it)
        (ws(("bring", 0.3, 0.6), ("her", 0.6, 0.8), ("along.", 0.8, 1.5)), [1.5]),
    ]
    for latest, want in ((True, "imagine a good idea. oh nice. bring her along."),
                         (False, "net in a good idea. oh nice. bring her along.")):
        script = list(decodes)

        class Backend:
            name = "scripted"

            def transcribe(self, audio, prompt=""):
                words, ends = script.pop(0) if len(script) > 1 else script[0]
                return BackendResult(words, ends, {})

        # a short buffer (trimmed within the test's 6 s) and no overlap: the buffer starts at the cut
        p = OnlineASRProcessor(Backend(), asr(buffer_trim_s=4.5, trim_overlap_s=0.0, trim_latest=latest))
        for _ in range(6):
            p.insert_audio_chunk(np.zeros(16000, np.float32))
            p.process_iter()
        assert p.buffer_time_offset == pytest.approx(2.9)  # trimmed once, at the latest decode's segment end
        shown = " ".join(w.text.strip() for w in p.committed)  # the partials' committed text takes them too
        assert shown.startswith(want.split(" oh")[0])
        assert p.prompt() == want.split(" bring")[0]  # the next decodes' prompt: the final text before the buffer
        p.finish()
        assert p.text == want


def test_the_decodes_that_give_the_final_text_use_the_backends_final_decode():
    """asr.final_beam_size: the decode at a VAD pause (``until``) and the one at the end of speech go through the
    backend's ``transcribe_final`` (beam search there); the partials' decodes do not."""
    import numpy as np

    calls = []

    class Backend(ScriptedBackend):
        def transcribe(self, audio, prompt=""):
            calls.append("partial")
            return super().transcribe(audio, prompt)

        def transcribe_final(self, audio, prompt=""):
            calls.append("final")
            return super().transcribe(audio, prompt)

    p = OnlineASRProcessor(Backend([W("turn the"), W("turn the lights"), W("turn the lights off")]), ASR)
    for _ in range(2):
        p.insert_audio_chunk(np.zeros(16000, np.float32))
        p.process_iter()
    p.insert_audio_chunk(np.zeros(16000, np.float32))
    p.process_iter(until=2.5)  # a pause: decoded up to it, the final text may be this decode
    p.insert_audio_chunk(np.zeros(8000, np.float32))
    p.finish(speech_end=3.2)  # speech went on after the pause: decoded once more, as a final
    assert calls == ["partial", "partial", "final", "final"]
    assert p.text == "turn the lights off"


@pytest.fixture
def generate_beams(monkeypatch):
    """The beam width (1 = greedy) of every CTranslate2 Whisper decoder call from here on, in order."""
    from engine.asr import whisper_ct2 as ct2_whisper

    seen = []
    orig = ct2_whisper.CT2WhisperDecoder.generate

    def spy(self, prefix, **options):
        seen.append(options.get("beam_size") or 1)
        return orig(self, prefix, **options)

    monkeypatch.setattr(ct2_whisper.CT2WhisperDecoder, "generate", spy)
    return seen


def test_ar_backend_decodes_the_final_text_with_beam_search(runtime, jfk_audio, generate_beams):
    """WhisperARBackend.transcribe_final runs CTranslate2's beam search of width final_beam_size (its partials stay
    greedy; SSD verifies against greedy and decodes its finals greedily); on jfk.flac the beam text is right."""
    from engine.asr.ctc_self_speculative import SSDCT2Backend
    from engine.asr.whisper_ar import WhisperARBackend

    audio, seen = jfk_audio, generate_beams
    m = runtime.whisper_ssd()
    text = "".join(w.text for w in WhisperARBackend(m, final_beam_size=5).transcribe_final(audio).words)
    assert seen == [5]
    WhisperARBackend(m, final_beam_size=5).transcribe(audio)
    SSDCT2Backend(m).transcribe_final(audio)
    assert 5 not in seen[1:]
    norm = text.lower().replace(",", "").replace(".", "").strip()
    assert jiwer.wer(JFK_TEXT.lower().replace(",", "").replace(".", ""), norm) < 0.1


def test_updates_hold_while_the_vad_hears_a_silence_inside_speech(runtime, jfk_path, jfk_audio):
    """asr.hold_at_silence: on a real-time source, an update due while the real VAD hears a silence inside jfk's
    speech waits (the pause's decode up to the end of speech would wait for it) when the transcriber's audio ends in
    that silence, and with asr.yield_to_pause also when it ends just before it (the transcriber lags the VAD);
    resumed speech, the setting off, or a file read faster than real time (the VAD runs ahead of the decodes) do
    not hold it."""
    from audio.sources import FileSource
    from audio.vad import CHUNK
    from engine.asr.transcriber import StreamingTranscriber

    def transcriber(hold, realtime=True, yield_to_pause=False):
        return StreamingTranscriber(FileSource(jfk_path, realtime=realtime), ScriptedBackend([W("x")]),
                                    runtime.vad(), lambda e: None,
                                    asr(hold_at_silence=hold, yield_to_pause=yield_to_pause))

    st, yielding = transcriber(True), transcriber(True, yield_to_pause=True)
    off, fast = transcriber(False, yield_to_pause=True), transcriber(True, realtime=False, yield_to_pause=True)
    held = resumed = 0
    for i in range(0, len(jfk_audio) - CHUNK, CHUNK):
        for t in (st, yielding, off, fast):
            t.vad(jfk_audio[i: i + CHUNK])
        now = (i + CHUNK) / 16000
        since = st.vad.silence_since
        assert yielding.vad.silence_since == since
        assert not off._in_silence(now) and not fast._in_silence(now) and not fast._in_silence()
        if since is None:
            resumed += st.vad.in_speech
            assert not st._in_silence(now) and not yielding._in_silence(now) and not yielding._in_silence()
        else:
            held += 1
            assert st._in_silence(now) and not st._in_silence(since - 0.05)
            assert yielding._in_silence(now) and yielding._in_silence(since - 0.05) and yielding._in_silence()
    assert held and resumed


def test_the_whisper_backend_abandons_a_decode_after_its_encoder_pass_when_asked(runtime, jfk_audio):
    """WhisperARBackend.transcribe's ``abandon``: checked once, after the encoder pass; True raises DecodeAbandoned
    (no decoder run), False decodes exactly as without it."""
    from engine.asr.backend import DecodeAbandoned
    from engine.asr.whisper_ar import WhisperARBackend

    be = WhisperARBackend(runtime.whisper_ssd())
    audio = jfk_audio[: 16000 * 6]
    asked = []
    with pytest.raises(DecodeAbandoned):
        be.transcribe(audio, "", abandon=lambda: asked.append(1) or True)
    assert asked == [1]
    kept = be.transcribe(audio, "", abandon=lambda: asked.append(2) or False)
    assert asked == [1, 2] and kept.words
    assert join_words(kept.words) == join_words(be.transcribe(audio, "").words)


class _AbandonAware(ScriptedBackend):
    """A scripted backend that checks ``abandon`` where the Whisper backend does (after its encoder pass)."""

    supports_abandon = True

    def __init__(self, hyps):
        super().__init__(hyps)
        self.decodes = 0

    def transcribe(self, audio, prompt="", abandon=None):
        from engine.asr.backend import DecodeAbandoned

        if abandon is not None and abandon():
            raise DecodeAbandoned("abandoned")
        self.decodes += 1
        return super().transcribe(audio, prompt)


def test_a_streaming_update_is_abandoned_in_a_silence_and_falls_due_again_when_speech_resumes(runtime, jfk_path,
                                                                                              jfk_audio):
    """asr.yield_to_pause: a streaming update whose backend finds, after its encoder pass, that the real VAD hears a
    silence inside jfk's speech (the pause's decode is about to supersede it) is abandoned: nothing committed or
    emitted, its compute counted, the buffer not marked decoded; with speech going on, the same update runs. A
    decode up to the VAD's pause (the final text's) is never abandoned, nor is any update with the setting off."""
    from audio.sources import FileSource
    from audio.vad import CHUNK
    from engine.asr.transcriber import StreamingTranscriber, UtteranceRecord

    assert runtime.cfg.asr.yield_to_pause and runtime.cfg.asr.hold_at_silence  # the defaults
    events = []
    st = StreamingTranscriber(FileSource(jfk_path, realtime=True), _AbandonAware([W("and so my fellow")]),
                              runtime.vad(), events.append, runtime.cfg.asr)
    proc = OnlineASRProcessor(st.backend, st.asr)
    rec = UtteranceRecord(index=0, t_start=0.0)
    i, in_silence = 0, False
    while not in_silence:  # up to the first silence the VAD hears inside the speech
        st.vad(jfk_audio[i: i + CHUNK])
        proc.insert_audio_chunk(jfk_audio[i: i + CHUNK])
        i += CHUNK
        in_silence = st.vad.silence_since is not None
    assert st._update(proc, rec) is False
    assert st.backend.decodes == 0 and not events and proc.committed == [] and proc.decoded_until == 0.0
    assert proc.updates[-1].stats["abandoned"] and st.stats.updates_abandoned == 1 and st.stats.updates == 0
    assert rec.asr_compute_s == st.stats.asr_compute_s == proc.updates[-1].compute_s
    assert st._update(proc, rec, until=proc.audio_end) is True  # the pause's decode runs in the silence
    assert st.backend.decodes == 1 and events and proc.decoded_until == pytest.approx(proc.audio_end)
    while st.vad.silence_since is not None:  # speech resumes
        st.vad(jfk_audio[i: i + CHUNK])
        proc.insert_audio_chunk(jfk_audio[i: i + CHUNK])
        i += CHUNK
    assert st._update(proc, rec) is True and st.backend.decodes == 2 and st.stats.updates == 2
    st.asr = dataclasses.replace(st.asr, yield_to_pause=False)  # off: an update running in a silence goes on
    while st.vad.silence_since is None:
        st.vad(jfk_audio[i: i + CHUNK])
        proc.insert_audio_chunk(jfk_audio[i: i + CHUNK])
        i += CHUNK
    assert st._update(proc, rec) is True and st.backend.decodes == 3 and st.stats.updates_abandoned == 1


@pytest.mark.parametrize("role", ["asr_draft", "asr_target"])
def test_pipeline_on_jfk_emits_partials_then_final(runtime, jfk_path, role):
    from audio.sources import FileSource
    from engine.asr.transcriber import StreamingTranscriber
    from engine.asr.faster_whisper_backend import FasterWhisperBackend

    be = FasterWhisperBackend(runtime.model(role).path)
    events = []
    # the live events only (the second pass's revisions would follow the last final), an update per second of audio
    st = StreamingTranscriber(FileSource(jfk_path, realtime=False), be, runtime.vad(), events.append,
                              asr(revise_max_s=0.0, min_chunk_s=1.0))
    stats = st.run()
    kinds = [type(e) for e in events]
    assert kinds[0] is SpeechStarted and kinds[-1] is FinalTranscript
    finals = [e for e in events if isinstance(e, FinalTranscript)]
    assert len(finals) == kinds.count(SpeechEnded) == kinds.count(SpeechStarted)
    # committed text only grows within an utterance (never rewritten); each partial carries the hypothesis of
    # the final text
    by_utt = {}
    for e in events:
        if isinstance(e, PartialTranscript):
            assert e.hypothesis.strip()
            prev = by_utt.get(e.utterance, "")
            assert e.committed.strip().startswith(prev.strip())
            by_utt[e.utterance] = e.committed
    text = " ".join(f.text for f in finals)
    tr = jiwer.Compose([jiwer.ToLowerCase(), jiwer.RemovePunctuation(), jiwer.RemoveMultipleSpaces(), jiwer.Strip()])
    wer = jiwer.wer(tr(JFK_TEXT), tr(text))
    assert wer <= 0.1, text
    assert stats.audio_s == pytest.approx(12.0, abs=0.2) and stats.rtf > 0
    for f in finals:  # every word overlaps its utterance (Whisper stretches a first word over the pause before it)
        assert all(w.end >= f.t_start and w.start <= f.t_end + 0.5 for w in f.words)


class OracleBackend:
    """A decoder that hears exactly the words that lie wholly inside the audio it gets. The test audio carries its
    own time (sample value = seconds / 100), so any slice of it tells where it starts; word k spans
    [0.5 k + 0.05, 0.5 k + 0.45] s and every sixth ends a sentence. A word cut in two is heard by no slice."""

    name = "oracle"

    def __init__(self, right_context_s: float = 0.0):
        self.decodes = 0
        self.starts: list[float] = []  # audio time where each decode's audio starts
        self.right_context_s = right_context_s  # > 0: a word is heard only with this much audio after it

    def words_between(self, t0: float, t1: float):
        k0 = max(0, int(t0 // 0.5) - 1)
        out = []
        for k in range(k0, int(t1 // 0.5) + 2):
            a, b = 0.5 * k + 0.05, 0.5 * k + 0.45
            if a >= t0 - 1e-6 and b <= t1 - self.right_context_s + 1e-6:
                out.append((k, a, b))
        return out

    def transcribe(self, audio, prompt=""):
        from engine.asr.backend import BackendResult

        self.decodes += 1
        t0 = float(audio[0]) * 100.0
        self.starts.append(t0)
        t1 = t0 + len(audio) / 16000
        words = [Word(a - t0, b - t0, f" w{k}" + ("." if k % 6 == 5 else ""))
                 for k, a, b in self.words_between(t0, t1)]
        return BackendResult(words, [w.end for w in words if w.text.endswith(".")] + [words[-1].end] if words else [],
                             {})


@pytest.mark.parametrize("final_piece_s,right_context_s,trim_overlap_s",
                         [(0.0, 0.0, 0.0), (8.0, 0.0, 0.0), (0.0, 0.02, 0.0), (8.0, 0.02, 0.0), (0.0, 0.02, 1.0),
                          (8.0, 0.02, 1.0)])
def test_a_run_on_utterance_is_cut_between_words_and_loses_none(final_piece_s, right_context_s, trim_overlap_s):
    """Speech without a pause is closed every ``max_utterance_s`` (so answers and captions are not starved): the cut
    falls between two words of the latest decode and the audio after it starts the next utterance, so every word
    is in exactly one final transcript (cutting at the audio's end split a word, which no decode then heard). With
    ``final_piece_s`` the long utterance is also finished in pieces while it is spoken. ``right_context_s``: the
    decoder misses a word that the audio ends right after (as Whisper can drop the last word of a window cut at
    it): the words before the cut come from a decode that heard past it, not from a decode that ends at it.
    ``trim_overlap_s``: each trimmed buffer keeps the audio of the words before its cut, which the decodes after
    it hear again: they are not emitted twice."""
    import time

    import numpy as np

    from audio.sources import ArraySource
    from engine.asr.transcriber import StreamingTranscriber

    class Paced(ArraySource):  # 300 blocks at 4 ms each: the decoder sees the audio grow, as from a microphone
        def __iter__(self):
            for block in super().__iter__():
                time.sleep(0.004)
                yield block

    n = 16000 * 30
    audio = (np.arange(n, dtype=np.float64) / 16000 / 100).astype(np.float32)
    events = []
    be = OracleBackend(right_context_s)
    # an update per second, a short buffer and run-on limit (several trims and cuts in 30 s), and no second pass
    # (the oracle decoder has no window decode)
    st = StreamingTranscriber(Paced(audio, realtime=False, trailing_silence_s=0.0), be, None, events.append,
                              asr(min_chunk_s=1.0, buffer_trim_s=4.0, final_piece_s=final_piece_s,
                                  trim_overlap_s=trim_overlap_s, revise_max_s=0.0), max_utterance_s=12.0)
    st.run()
    finals = [e for e in events if isinstance(e, FinalTranscript)]
    assert len(finals) >= 2  # the run-on limit closed it at least once
    words = " ".join(f.text for f in finals).replace(".", "").split()
    assert words == [f"w{k}" for k in range(60)]
    # a trim's overlap starts the buffer at a word start (it hears the words before the cut); else at a word end
    assert any(abs(t % 0.5 - 0.05) < 0.01 for t in be.starts) == (trim_overlap_s > 0)
    for f in finals[:-1]:  # each cut is at a word end: no later utterance starts inside a word
        assert f.t_end == pytest.approx(0.5 * int(f.t_end // 0.5) + 0.45, abs=0.02) or f.t_end % 0.5 < 0.06


def test_the_final_decode_verifies_its_draft_exactly(runtime, jfk_path):
    """The decode of a whole utterance takes the streaming text as a draft, verified in one decoder pass by
    ``majority_accepted`` (p > 1/2), then greedy decoding goes on from the accepted prefix: on real audio its text
    is greedy decoding's, whatever the draft (right, wrong from the middle, wrong from the start), for plain AR and
    for SSD (whose partials use the relaxed τ_SLM); a right draft is accepted up to its first token with p ≤ 1/2."""
    from audio.io import load_audio
    from engine.asr.ctc_self_speculative import SSDCT2Backend
    from engine.asr.whisper_ar import WhisperARBackend

    audio = load_audio(jfk_path)
    m = runtime.whisper_ssd()
    ar = WhisperARBackend(m, final_beam_size=1)  # greedy finals: a beam search would not take the draft
    greedy = ar.transcribe(audio)
    g_text = "".join(w.text for w in greedy.words).strip()
    assert greedy.stats["stage"] == "ar"
    right = ar.transcribe_final(audio, draft=g_text)
    assert "".join(w.text for w in right.words).strip() == g_text
    assert right.stats["draft_tokens"] > 10 and right.stats["accepted"] > 0  # up to its first token with p ≤ 1/2
    wrong_mid = g_text.replace("what your country", "when the country")
    wrong_start = "Hello there, " + g_text
    for backend in (ar, SSDCT2Backend(m)):
        for draft in (wrong_mid, wrong_start):
            r = backend.transcribe_final(audio, draft=draft)
            assert "".join(w.text for w in r.words).strip() == g_text, (backend.name, draft)
            assert r.stats["accepted"] < r.stats["draft_tokens"]


def test_runtime_backend_decodes_finals_with_the_configured_beam(cfg, jfk_audio, generate_beams):
    """The ASR backend the runtime builds (the one the CLI, the GUI and the benchmarks use) decodes an utterance's
    final text with beam search of width asr.final_beam_size and its partials greedily; asr.final_beam_size = 1
    makes the final greedy too."""
    from engine.runtime import Runtime

    audio, seen = jfk_audio, generate_beams
    texts = {}
    for width in (cfg.asr.final_beam_size, 1):
        backend = Runtime(cfg.with_overrides({"asr": {"final_beam_size": width}}), progress=False).asr_backend()
        seen.clear()
        backend.transcribe(audio)
        assert seen and set(seen) == {1}  # a partial's decode: greedy
        seen.clear()
        texts[width] = join_words(backend.transcribe_final(audio).words)
        assert seen[0] == width
    for text in texts.values():
        norm = text.lower().replace(",", "").replace(".", "").strip()
        assert jiwer.wer(JFK_TEXT.lower().replace(",", "").replace(".", ""), norm) < 0.1
