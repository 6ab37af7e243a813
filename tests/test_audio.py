"""Audio input: any format/rate/channels, bad files, VAD on real speech, no microphone."""

import numpy as np
import pytest
import soundfile as sf

from audio.io import AudioError, load_audio, resample
from audio.sources import ArraySource, FileSource, MicSource, input_devices
from audio.vad import StreamingVAD


def test_rates_and_channels_resample_to_16k_mono(tmp_path, jfk_audio):
    stereo44 = resample(jfk_audio, 16000, 44100)
    stereo44 = np.stack([stereo44, 0.5 * stereo44], 1)
    for rate, data, ext in [(44100, stereo44, "wav"), (8000, resample(jfk_audio, 16000, 8000), "flac"),
                            (48000, resample(jfk_audio, 16000, 48000), "ogg")]:
        p = tmp_path / f"x{rate}.{ext}"
        sf.write(p, data, rate)
        a = load_audio(p)
        assert a.dtype == np.float32 and a.ndim == 1
        assert abs(len(a) - len(jfk_audio)) < 16000 * 0.05, (rate, len(a))
        # same signal: energy envelope correlates with the original
        n = min(len(a), len(jfk_audio)) // 1600 * 1600
        e1 = np.sqrt((a[:n].reshape(-1, 1600) ** 2).mean(1))
        e2 = np.sqrt((jfk_audio[:n].reshape(-1, 1600) ** 2).mean(1))
        assert np.corrcoef(e1, e2)[0, 1] > 0.9


@pytest.mark.parametrize("kind", ["missing", "empty", "text", "zero_length", "dir", "truncated"])
def test_bad_audio_is_a_clear_error(tmp_path, jfk_path, kind):
    p = tmp_path / "bad.wav"
    if kind == "missing":
        p = tmp_path / "nope.wav"
    elif kind == "empty":
        p.write_bytes(b"")
    elif kind == "text":
        p.write_text("this is not audio at all\n" * 50)
    elif kind == "zero_length":
        sf.write(p, np.zeros(0, np.float32), 16000)
    elif kind == "dir":
        p = tmp_path
    elif kind == "truncated":
        p = tmp_path / "bad.flac"
        p.write_bytes(jfk_path.read_bytes()[:200])
    with pytest.raises(AudioError) as e:
        load_audio(p)
    assert "\n" not in str(e.value) and str(p.name) in str(e.value) or kind == "dir"


def test_vad_finds_the_speech_in_jfk(runtime, jfk_audio):
    vad = StreamingVAD(runtime.model("vad").path)
    events = []
    for i in range(0, len(jfk_audio), 1600):
        events += vad(jfk_audio[i : i + 1600])
    events += vad.flush()
    starts = [e.t for e in events if e.kind == "start"]
    ends = [e.t for e in events if e.kind == "end"]
    assert len(starts) == len(ends) >= 1
    assert starts[0] < 0.6 and ends[-1] > 10.0
    # silence has no speech
    vad2 = StreamingVAD(runtime.model("vad").path)
    assert vad2(np.zeros(16000 * 3, np.float32)) == [] and vad2.flush() == []


def test_vad_pause_comes_before_the_end_at_the_same_time(runtime, jfk_audio):
    """A pause event marks a possible end of speech as soon as the pad of silence is there; when the silence lasts,
    the end event that follows has the same time (so the final transcript can be decoded at the pause)."""
    vad = StreamingVAD(runtime.model("vad").path)
    events = []
    audio = np.concatenate([jfk_audio, np.zeros(16000, np.float32)])
    for i in range(0, len(audio), 1600):
        events += [(e, i + 1600) for e in vad(audio[i : i + 1600])]
    ends = [(e, n) for e, n in events if e.kind == "end"]
    assert ends
    for end, n_end in ends:
        pauses = [(e, n) for e, n in events if e.kind == "pause" and abs(e.t - end.t) < 1e-6]
        assert pauses, f"no pause before the end at {end.t}"
        assert pauses[-1][1] < n_end  # heard earlier, by at least one block
        assert pauses[-1][1] / 16000 >= end.t  # the audio up to the pause time was there when it was raised


class _Clock:
    """A monotonic clock that moves only when a source waits (stands in for ``time`` in audio.sources)."""

    def __init__(self):
        self.now, self.waits = 1000.0, []

    def monotonic(self) -> float:
        return self.now


class _ClockStop:
    """A source's stop event that is never set; waiting on it advances :class:`_Clock` by the time waited."""

    def __init__(self, clock: _Clock):
        self.clock = clock

    def is_set(self) -> bool:
        return False

    def wait(self, seconds: float) -> bool:
        self.clock.waits.append(seconds)
        self.clock.now += seconds
        return False


def test_file_source_paces_and_fast_mode(jfk_path, monkeypatch):
    import audio.sources

    src = FileSource(jfk_path, block_s=0.1, realtime=False, trailing_silence_s=0)
    blocks = list(src)
    assert sum(len(b.samples) for b in blocks) == 176000
    assert blocks[1].t_start == pytest.approx(0.1)
    # real-time pace: each block comes out when its last sample would have been heard, on the source's clock
    clock = _Clock()
    monkeypatch.setattr(audio.sources, "time", clock)
    for realtime, due in ((True, [0.1, 0.2, 0.3, 0.4, 0.5]), (False, [0.0] * 5)):
        clock.waits.clear()
        src = ArraySource(np.zeros(8000, np.float32), block_s=0.1, realtime=realtime, trailing_silence_s=0)
        src._stop = _ClockStop(clock)
        t0 = clock.now
        assert [round(b.wall - t0, 6) for b in src] == due
        assert sum(clock.waits) == pytest.approx(due[-1]) and (len(clock.waits) == 5) == realtime


def test_no_microphone_is_a_clear_error():
    if input_devices():
        pytest.skip("this machine has an input device")
    with pytest.raises(AudioError, match="no microphone"):
        MicSource()
