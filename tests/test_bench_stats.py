"""bench.stats and bench.inputs: the percentiles every benchmark reports, and the audio files it is given."""

import pytest

from bench.inputs import audio_files
from bench.stats import pct, percentiles, rnd


def test_percentiles_skip_missing_values():
    xs = [0.5, None, 1.5, 1.0, None, 2.0]
    assert pct(xs, 50) == 1.25 and pct(xs, 90) == 1.85 and pct([None], 50) is None
    assert percentiles(xs) == {"p50": 1.25, "p90": 1.85, "max": 2.0, "n": 4}
    assert percentiles([]) == {"p50": None, "p90": None, "max": None, "n": 0}
    assert rnd(None) is None and rnd(1.23456, 2) == 1.23


def test_benchmarks_take_files_folders_and_patterns(tmp_path):
    """bench.inputs.audio_files: files as given, a folder's WAV/FLAC files sorted, a pattern's matches sorted; a
    missing path or an empty pattern is a clear error naming the benchmark."""
    d = tmp_path / "speech"
    d.mkdir()
    for n in ("b.flac", "a.WAV", "notes.txt"):
        (d / n).write_bytes(b"")
    one = tmp_path / "one.ogg"
    one.write_bytes(b"")
    assert audio_files([str(one), d], "x") == [one, d / "a.WAV", d / "b.flac"]
    assert audio_files([str(d / "*.flac")], "x") == [d / "b.flac"]
    with pytest.raises(SystemExit, match="voice bench: no such file or folder"):
        audio_files([str(tmp_path / "missing.wav")], "voice bench")
    with pytest.raises(SystemExit, match="x: nothing matches"):
        audio_files([str(d / "*.mp3")], "x")
