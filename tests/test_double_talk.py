"""Talking over the assistant: what the utterance VAD does with the loudspeaker's echo and with a user who barges in
(real Silero VAD, real WebRTC AEC3 through livekit, real speech; every time in audio time)."""

import numpy as np
import pytest

from audio.io import load_audio

from .conftest import QUESTION

SR = 16000
BLOCK = 1600  # 0.1 s, as the microphone sources deliver


@pytest.fixture(scope="module")
def vad_path(runtime):
    return runtime.model("vad").path


def _events(vad, x):
    ev = []
    for i in range(0, len(x), BLOCK):
        ev += vad(x[i:i + BLOCK])
    return ev + vad.flush()


def test_an_utterance_never_starts_before_the_previous_one_ended(vad_path, jfk_audio):
    """After an end of turn at a short pause (Smart Turn at 0.2 s), the next utterance's pre-roll pad used to reach
    back into the previous utterance: both decoded the same audio and its words twice ("Hold on." + "on? Can you
    repeat…"). The end-of-turn model is replaced by "always complete" here: the subject is the VAD's boundaries."""
    from audio.vad import StreamingVAD

    q = load_audio(QUESTION)
    cases = [(jfk_audio, (0.0, 2.3), (3.3, 11.0)), (q, (0.0, 2.9), (3.1, 5.8))]
    clipped = 0
    for gap in (0.22, 0.25, 0.3):
        for x, a, b in cases:
            audio = np.concatenate([x[int(a[0] * SR):int(a[1] * SR)], np.zeros(int(gap * SR), np.float32),
                                    x[int(b[0] * SR):int(b[1] * SR)]])
            vad = StreamingVAD(vad_path, min_silence_s=2.0, pause_s=0.2, turn_hook=lambda audio: 1.0)
            bounds = [(e.kind, e.t) for e in _events(vad, audio) if e.kind in ("start", "end")]
            assert [k for k, _ in bounds] == ["start", "end"] * (len(bounds) // 2) and len(bounds) >= 4, bounds
            for (_, end), (_, start) in zip(bounds[1::2], bounds[2::2]):
                assert start >= end - 1e-9, bounds
                clipped += abs(start - end) < 1e-9
    assert clipped >= 3  # the pad would have reached back in these cases: the start was clipped to the end


def _room(far, user, user_at, vad_path, seconds, delay_ms=80, gain=0.5):
    """A loudspeaker playing ``far`` from 0 s (stopped at the first barge-in, as the app's player is) and a user
    saying ``user`` from ``user_at`` s, heard through one microphone (80 ms echo path with a decaying tail), echo-
    cancelled by the app's canceller and watched by its barge-in detector, in lock step. Returns (barge-ins, events
    of a plain StreamingVAD, events of the EchoGatedVAD, the gate), the two VADs fed the same cleaned blocks."""
    from audio.aec import BargeInDetector, EchoCanceller, EchoCancelledSource, EchoGatedVAD
    from audio.sources import AudioBlock, AudioSource
    from audio.vad import StreamingVAD

    rng = np.random.default_rng(0)
    n = int(0.25 * SR)
    h = rng.standard_normal(n) * np.exp(-6.9 * np.arange(n) / n)
    h *= 0.4 / np.sqrt((h ** 2).sum())
    h[0] = 1.0
    ir = np.concatenate([np.zeros(int(delay_ms * SR / 1000)), h]) * gain
    total = int(seconds * SR)
    mine = np.zeros(total, np.float32)
    u0 = int(user_at * SR)
    mine[u0:u0 + len(user)] = user[:total - u0]
    noise = rng.standard_normal(total).astype(np.float32) * 3e-4
    barges: list[float] = []

    class Mic(AudioSource):
        name, realtime = "room", False

        def __iter__(self):
            hist = np.zeros(len(ir), np.float32)
            for i in range(0, total - BLOCK + 1, BLOCK):
                played = np.zeros(BLOCK, np.float32)
                if not barges:
                    seg = far[i:i + BLOCK]
                    played[:len(seg)] = seg
                src.on_played(played.copy(), SR, 0.0)  # as audio.playback.Player's reference callback
                hist = np.concatenate([hist, played])
                echo = np.convolve(hist, ir)[len(hist) - BLOCK:len(hist)]
                hist = hist[-len(ir):]
                yield AudioBlock((echo + mine[i:i + BLOCK] + noise[i:i + BLOCK]).astype(np.float32), i / SR, 0.0)

    aec = EchoCanceller(delay_ms=100.0)
    if not aec.available:
        pytest.skip(aec.reason)
    aec.input_latency_ms = 100.0
    src = EchoCancelledSource(Mic(), aec, BargeInDetector(vad_path, barges.append))
    plain, gate = StreamingVAD(vad_path), EchoGatedVAD(StreamingVAD(vad_path), src.barge_in)
    ev_plain, ev_gated = [], []
    for b in src:
        ev_plain += plain(b.samples)
        ev_gated += gate(b.samples)
    return barges, ev_plain, ev_gated, gate


def test_the_user_barging_in_starts_the_utterance_where_the_detector_heard_them(vad_path, jfk_audio):
    """The answer (the question recording, twice, peaks 0.9) plays on the loudspeaker; the user (JFK, peak 0.4) talks
    over it after the detector's warm-up. The barge-in stops playback; the utterance starts no later than the plain
    VAD's start, before the detector's onset (less the pad), and its end is the plain VAD's; the echo before the
    user starts nothing."""
    from bench.duplex_bench import speech_span

    q = load_audio(QUESTION)
    far = (np.concatenate([q, q]) * (0.9 / np.abs(q).max())).astype(np.float32)
    user = (jfk_audio[:3 * SR] * (0.4 / np.abs(jfk_audio).max())).astype(np.float32)
    earlier = 0
    for at in (4.0, 4.37, 6.21):
        barges, ev_plain, ev_gated, gate = _room(far, user, at, vad_path, at + 5.0)
        onset = at + speech_span(user)[0]
        assert barges and onset <= barges[0] <= onset + 1.2, (barges, onset)
        starts = [e.t for e in ev_gated if e.kind == "start"]
        ends = [e.t for e in ev_gated if e.kind == "end"]
        plain_starts = [e.t for e in ev_plain if e.kind == "start"]
        assert len(starts) == 1 and starts[0] > onset - 0.5, (ev_gated, onset)  # no utterance from the echo
        assert starts[0] <= plain_starts[-1] and ends == [e.t for e in ev_plain if e.kind == "end"][-1:], \
            (ev_gated, ev_plain)
        assert starts[0] <= barges[0] - 0.2  # the words that fired the barge-in are in the utterance
        earlier += starts[0] < plain_starts[-1] - 0.03
        assert gate.dropped == 0
    assert earlier >= 2  # AEC3's suppression of the first words delayed the plain VAD's start


def test_echo_the_canceller_lets_through_starts_no_utterance(vad_path):
    """While AEC3 converges its output can hold the echo nearly whole (here: not cancelled at all, 0.2 × the far
    end 80 ms later): the plain VAD starts an utterance on the assistant's own voice — a barge-in that stops the
    answer and a "user" turn made of its words. The barge-in detector's echo-envelope check explains it, so the
    gated VAD holds the start and drops the utterance when it ends; without a far end the same speech passes."""
    from audio.aec import BargeInDetector, EchoGatedVAD
    from audio.vad import StreamingVAD

    q = load_audio(QUESTION)
    far = np.zeros(8 * SR, np.float32)
    far[SR:SR + int(2.5 * SR)] = q[int(0.5 * SR):int(3.0 * SR)] * (0.5 / np.abs(q).max())
    d = int(0.08 * SR)
    mic = np.zeros_like(far)
    mic[d:] = far[:-d] * 0.2
    mic += np.random.default_rng(0).standard_normal(len(mic)).astype(np.float32) * 3e-4
    for with_far in (True, False):
        fired: list[float] = []
        det = BargeInDetector(vad_path, fired.append)
        plain, gate = StreamingVAD(vad_path), EchoGatedVAD(StreamingVAD(vad_path), det)
        ev_plain, ev_gated = [], []
        for i in range(0, len(mic), BLOCK):
            if with_far:
                det.far_level(far[i:i + BLOCK], i / SR)
            det(mic[i:i + BLOCK], (i + BLOCK) / SR, mic[i:i + BLOCK])
            ev_plain += plain(mic[i:i + BLOCK])
            ev_gated += gate(mic[i:i + BLOCK])
        ev_plain += plain.flush()
        ev_gated += gate.flush()
        assert [e.kind for e in ev_plain if e.kind != "pause"] == ["start", "end"], ev_plain
        assert not fired
        if with_far:
            assert ev_gated == [] and gate.dropped == 1
        else:
            assert ev_gated == ev_plain and gate.dropped == 0
