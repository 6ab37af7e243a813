"""Full duplex on real models: WebRTC echo cancellation (livekit APM) on a simulated loudspeaker echo, and the Smart
Turn v3.2 end-of-turn model on synthesised speech (Piper), alone and as the VAD's end-of-turn hook."""

import numpy as np
import pytest

from audio.aec import EchoCanceller, apm_available, erle_db
from audio.io import resample
from audio.vad import StreamingVAD

SR = 16000


def echo_path(far: np.ndarray, delay_ms: float, gain: float, seed: int = 0) -> np.ndarray:
    """Loudspeaker → microphone: delay, a synthetic room (exponentially decaying noise, RT60 0.3 s), gain, and a
    little microphone noise (−60 dBFS)."""
    rng = np.random.default_rng(seed)
    n = int(0.3 * SR)
    h = rng.standard_normal(n) * np.exp(-6.9 * np.arange(n) / n)
    h[:80] = 0.0
    h *= 0.5 / np.sqrt((h ** 2).sum())
    h[0] = 1.0
    y = np.convolve(far, h)[: len(far)] * gain
    d = int(delay_ms * SR / 1000)
    y = np.concatenate([np.zeros(d), y])[: len(far)]
    return (y + rng.standard_normal(len(y)) * 1e-3).astype(np.float32)


def speech_chunks(runtime, x: np.ndarray) -> int:
    """Number of 32 ms chunks the Silero VAD scores as speech (p ≥ 0.5)."""
    vad = StreamingVAD(runtime.model("vad").path)
    n = len(x) // 512 * 512
    return int((vad.probs(x[:n].reshape(-1, 512)) >= 0.5).sum())


@pytest.fixture(scope="module")
def piper(runtime):
    """Piper's voice without its sampling noise (noise_scale = noise_w = 0): VITS samples the latent and the
    durations inside its graph, so otherwise each call says the sentence with other pauses and timing."""
    import copy

    from piper import SynthesisConfig

    tts = copy.copy(runtime.tts())
    tts.syn_config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)

    def say(text: str) -> np.ndarray:
        from bench.make_speech import trim

        return trim(resample(tts.synthesize(text), tts.sample_rate, SR))

    return say


def test_echo_cancellation_is_available():
    """livekit (WebRTC APM) is a core dependency: its absence is a broken install, not a reason to skip."""
    assert apm_available() == (True, "")


def test_echo_only_mic_is_cancelled_and_the_vad_fires_less(runtime, jfk_audio):
    far = np.concatenate([jfk_audio, jfk_audio]).astype(np.float32)  # 22 s of the assistant "speaking"
    near = echo_path(far, delay_ms=80, gain=0.6)
    aec = EchoCanceller(delay_ms=80)
    out = aec.process_duplex(far, near)
    settled = 5 * SR  # after convergence
    erle = erle_db(near[settled:], out[settled:])
    assert erle >= 10.0, f"ERLE {erle:.1f} dB"
    raw_speech, clean_speech = speech_chunks(runtime, near[settled:]), speech_chunks(runtime, out[settled:])
    assert raw_speech > 100 and clean_speech < raw_speech / 3, (raw_speech, clean_speech)


def test_streaming_far_and_near_through_the_player_sink(jfk_audio):
    """The playback path: far end at the player's rate (22.05 kHz) in 1024-sample blocks with a latency, the
    microphone in 1600-sample blocks; the cleaned stream comes back in whole 10 ms frames, echo removed."""
    far16 = jfk_audio.astype(np.float32)
    far22 = resample(far16, SR, 22050)
    near = echo_path(far16, delay_ms=40, gain=0.5, seed=1)
    aec = EchoCanceller(delay_ms=0)
    aec.input_latency_ms = 10.0
    out = []
    fi = 0
    for i in range(0, len(near), 1600):
        t_end = (i + 1600) / SR
        while fi < len(far22) and fi / 22050 < t_end:
            aec.on_played(far22[fi:fi + 1024], 22050, 0.03)
            fi += 1024
        out.append(aec.process_near(near[i:i + 1600]))
    out = np.concatenate(out)
    assert len(out) % 160 == 0 and len(near) - len(out) < 160
    assert aec.delay_ms == 40
    assert erle_db(near[4 * SR:len(out)], out[4 * SR:]) >= 10.0


def test_a_complete_sentence_scores_higher_than_the_same_sentence_cut(piper):
    from audio.turn import TurnDetector

    td = TurnDetector()
    tail = np.zeros(int(0.2 * SR), np.float32)
    for full, cut in [("What is the weather going to be like in Paris tomorrow?", "What is the weather going to be "
                       "like in, um,"),
                      ("I would like to book a table for two people tonight.", "I would like to book a table for, "
                       "um,")]:
        x_full, x_cut = np.concatenate([piper(full), tail]), np.concatenate([piper(cut), tail])
        p_full, p_cut = td.complete_probability(x_full), td.complete_probability(x_cut)
        assert 0.0 <= p_cut < p_full <= 1.0, (full, p_full, p_cut)
        assert td.is_complete(x_full) and not td.is_complete(x_cut), (full, p_full, p_cut)


def test_the_exact_int8_kernel_is_used_where_the_default_one_saturates(tmp_path, jfk_audio, runtime):
    """Smart Turn's quantised products: the CPU's flags choose onnxruntime's exact kernel on x86-64 without VNNI, and
    the detector this CPU gets gives the exact kernel's probabilities (on a VNNI CPU the default kernel is exact)."""
    import platform

    from audio.turn import TurnDetector
    from engine.core.cpu import int8_gemm_saturates

    x86 = platform.machine().lower() in ("x86_64", "amd64")
    avx2 = tmp_path / "avx2"
    avx2.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu avx2\n")
    vnni = tmp_path / "vnni"
    vnni.write_text("flags\t\t: fpu avx2 avx512f avx512_vnni\n")
    alder = tmp_path / "alder"
    alder.write_text("flags\t\t: fpu avx2 avx_vnni\n")
    assert int8_gemm_saturates(avx2) == x86
    assert not int8_gemm_saturates(vnni) and not int8_gemm_saturates(alder)
    assert int8_gemm_saturates(tmp_path / "missing") == x86

    auto, exact = runtime.turn_detector(), TurnDetector(exact_int8=True)
    assert auto.exact_int8 == int8_gemm_saturates() and exact.exact_int8
    for end_s in (2.4, 4.5, 7.8, 11.0):
        a = jfk_audio[: int(end_s * SR)]
        assert auto.complete_probability(a) == pytest.approx(exact.complete_probability(a), abs=1e-3), end_s


def test_vad_turn_hook_holds_a_mid_sentence_pause(runtime, piper):
    """A 1 s pause after "…like in, um," ends the utterance for the plain VAD (0.6 s silence); with Smart Turn
    as the hook (and a 2 s hard limit) it does not, and the turn still ends after the question."""
    from audio.turn import TurnDetector

    a, b = piper("What is the weather going to be like in, um,"), piper("Paris tomorrow?")
    x = np.concatenate([np.zeros(8000, np.float32), a, np.zeros(SR, np.float32), b, np.zeros(3 * SR, np.float32)])

    def run(vad):
        ev = []
        for i in range(0, len(x), 1600):
            ev += vad(x[i:i + 1600])
        return ev + vad.flush()

    plain = run(StreamingVAD(runtime.model("vad").path))
    assert [e.kind for e in plain].count("end") == 2
    smart = run(StreamingVAD(runtime.model("vad").path, min_silence_s=2.0, turn_hook=TurnDetector()))
    ends = [e for e in smart if e.kind == "end"]
    turns = [e for e in smart if e.kind == "turn"]
    assert len(ends) == 1 and ends[0].t > (8000 + len(a) + SR + len(b)) / SR - 0.1
    assert turns and turns[0].p < 0.5 and turns[0].t < ends[0].t
    # without a hook the VAD's events carry no turn decisions (unchanged behaviour)
    assert all(e.p is None for e in plain) and not any(e.kind == "turn" for e in plain)


def test_barge_in_fires_on_the_user_not_on_the_echo(runtime, jfk_audio, piper):
    """The capture wrapper cleans each block and the barge-in detector (armed by the far end) fires once, soon
    after the user starts talking over the assistant, and never on the echo alone."""
    from audio.aec import BargeInDetector, EchoCancelledSource
    from audio.sources import AudioBlock, AudioSource

    far = np.concatenate([jfk_audio, jfk_audio]).astype(np.float32)
    user = piper("Wait, stop, that is not what I asked.") * 0.6
    u0 = 15 * SR
    mic = echo_path(far, delay_ms=60, gain=0.8, seed=2)
    mic[u0:u0 + len(user)] += user[: len(mic) - u0]

    class Duplex(AudioSource):
        realtime = False

        def __iter__(self):
            for i in range(0, len(mic), 1600):
                src.on_played(far[i:i + 1600], SR, 0.0)  # played just before its echo is captured
                yield AudioBlock(mic[i:i + 1600], i / SR, 0.0)

    fired = []
    src = EchoCancelledSource(Duplex(), EchoCanceller(delay_ms=60),
                              BargeInDetector(runtime.model("vad").path, fired.append))
    blocks = list(src)
    assert sum(len(b.samples) for b in blocks) == len(mic) // 1600 * 1600
    assert blocks[-1].t_start == pytest.approx((len(blocks) - 1) * 0.1)
    # once, while the user speaks over the echo (the loud far end here masks "Wait," — latency is bench duplex's)
    assert len(fired) == 1 and 15.0 < fired[0] < 15.0 + len(user) / SR, fired


def test_smart_turn_end_of_turn_through_the_live_pipeline(jfk_audio):
    """``duplex.end_of_turn=smart_turn``: the transcriber reports each turn decision and transcribes all of jfk."""
    from audio.sources import ArraySource
    from engine.config import load_config
    from engine.core.events import FinalTranscript, TurnDecision
    from engine.runtime import Runtime
    from .conftest import JFK_TEXT, normalized_wer

    rt = Runtime(load_config(None, None, ["duplex.end_of_turn=smart_turn"]))
    events = []
    st = rt.transcriber(ArraySource(jfk_audio, realtime=False, trailing_silence_s=2.5), events.append)
    st.run()
    turns = [e for e in events if isinstance(e, TurnDecision)]
    finals = " ".join(e.text for e in events if isinstance(e, FinalTranscript)).lower()
    assert turns and all(0.0 <= t.p_complete <= 1.0 for t in turns)
    # every word, in order: jfk's long pauses may end a turn mid-sentence (Smart Turn is near its threshold after
    # "ask not"), and a 1.5 s piece decoded on its own may come out "asked not" — one word of 22
    assert normalized_wer(JFK_TEXT, finals) <= 0.1, finals


def test_double_talk_path_detects_the_onset_sooner_than_the_vad_alone(runtime, jfk_audio, piper):
    """The barge-in detector on the cleaned microphone of a real APM: the double-talk path (a weak Silero
    probability on a chunk the canceller left nearly untouched, far above the cleaned floor) fires within 0.3 s of
    the user's onset; the VAD path alone (low_threshold=1.0) fires later; once the canceller has converged neither
    fires on the echo alone."""
    from audio.aec import BargeInDetector, EchoCancelledSource
    from audio.sources import AudioBlock, AudioSource
    from bench.duplex_bench import speech_span

    far = np.concatenate([jfk_audio, jfk_audio]).astype(np.float32)
    far *= 0.5 / np.abs(far).max()  # the benchmark's levels: answer peak 0.5, user peak 0.4, echo gain 0.6
    user = piper("Hold on, can you repeat the last part?")
    user *= 0.4 / np.abs(user).max()
    u0 = 12 * SR
    mic = echo_path(far, delay_ms=90, gain=0.6, seed=3)
    mic[u0:u0 + len(user)] += user[: len(mic) - u0]
    onset = u0 / SR + speech_span(user)[0]

    def run(**kw):
        class Duplex(AudioSource):
            realtime = False

            def __iter__(self):
                for i in range(0, len(mic), 480):  # 30 ms blocks, as the benchmark
                    src.on_played(far[i:i + 480], SR, 0.09)  # the player's measured latency: the echo's delay
                    yield AudioBlock(mic[i:i + 480], i / SR, 0.0)

        fired = []
        det = BargeInDetector(runtime.model("vad").path, fired.append, **kw)
        src = EchoCancelledSource(Duplex(), EchoCanceller(delay_ms=90), det)
        for _ in src:
            pass
        return fired, det

    fast, det = run()
    slow, _ = run(low_threshold=1.0)
    # while AEC3 converges (first seconds) echo bursts can pass; the double-talk path is off then (warm-up), so it
    # adds nothing to what the VAD path does there
    assert [t for t in fast if t < 5.0] == [t for t in slow if t < 5.0]
    fast, slow = [t for t in fast if t >= 5.0], [t for t in slow if t >= 5.0]
    # never on the echo alone: every barge-in falls in the user's speech; the VAD-only path may fire again there
    # after a dip re-arms it (its probabilities near 0.5 differ by a hair between runs), the double-talk path once
    end = u0 / SR + len(user) / SR
    assert len(fast) == 1 and slow and all(onset <= t <= end for t in fast + slow), (onset, fast, slow)
    assert onset <= fast[0] <= onset + 0.3, (onset, fast)
    assert det.last_path == "double_talk"
    assert slow[0] > fast[0], (fast, slow)


def test_barge_in_detector_checks_raw_alignment(runtime):
    from audio.aec import BargeInDetector

    det = BargeInDetector(runtime.model("vad").path, lambda t: None)
    with pytest.raises(ValueError):
        det(np.zeros(480, np.float32), 0.03, np.zeros(481, np.float32))


def test_while_the_canceller_converges_echo_the_far_end_explains_does_not_barge_in(runtime, jfk_audio, piper):
    """The first seconds of far end, before AEC3 has converged, in the worst case of a canceller that removes
    nothing (the detector is handed the raw microphone as the cleaned one): the VAD rule alone takes the echo for
    the user, the echo-envelope check holds it back (loud and quiet rooms); a user well above the echo (peak 0.4
    over an echo path of gain 0.2) is still detected within 0.3 s of the onset."""
    from audio.aec import BargeInDetector
    from bench.duplex_bench import speech_span

    far = jfk_audio[: int(2.9 * SR)].astype(np.float32)  # within the 3 s warm-up (armed time includes the hold)
    far *= 0.5 / np.abs(far).max()
    user = piper("Hold on, can you repeat the last part?")
    user *= 0.4 / np.abs(user).max()
    u0 = int(1.2 * SR)
    onset = u0 / SR + speech_span(user)[0]

    def run(mic, **kw):
        fired = []
        det = BargeInDetector(runtime.model("vad").path, fired.append, **kw)
        for i in range(0, len(mic) - 479, 480):
            det.far_level(far[i:i + 480], i / SR)
            det(mic[i:i + 480], (i + 480) / SR, mic[i:i + 480])
        return fired

    for gain in (0.2, 0.8):
        echo = echo_path(far, delay_ms=70, gain=gain, seed=4)
        assert run(echo, explain_margin_db=None), f"gain {gain}: the VAD rule alone should fire on the echo"
        assert run(echo) == [], f"gain {gain}"
    talk = echo_path(far, delay_ms=70, gain=0.2, seed=4)
    talk[u0:] += user[: len(talk) - u0]
    fired = run(talk)
    assert fired and onset <= fired[0] <= onset + 0.3, (onset, fired)
