"""The codec TTS training-data cache (engine.synthesis.training): one .npz keyed by the teacher voice's sha256,
rebuilt when missing or corrupt, never a pickle."""

import pickle

import numpy as np
import pytest

from engine.synthesis import training as T


def _items():
    rng = np.random.default_rng(0)
    out = []
    for t, n in (("Grüße, Welt.", 7), ("A b.", 3)):
        dur = rng.integers(1, 6, n).astype(np.int32)
        out.append({"text": t, "ids": rng.integers(0, 200, n).astype(np.int16), "dur": dur,
                    "m_p": rng.standard_normal((n, 192)).astype(np.float16),
                    "z": rng.standard_normal((int(dur.sum()), 192)).astype(np.float16)})
    return out


def test_round_trip_keeps_every_array(tmp_path):
    f = tmp_path / "data.npz"
    T.save_data(f, _items(), "a" * 64)
    d = T.read_data(f, "a" * 64)
    assert d["voice_sha256"] == "a" * 64 and [x["text"] for x in d["items"]] == ["Grüße, Welt.", "A b."]
    for a, b in zip(d["items"], _items()):
        assert set(a) == set(b)
        for k in ("ids", "dur", "m_p", "z"):
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k])
    assert T.read_data(f, "b" * 64) is None  # another voice's data is not used


@pytest.mark.parametrize("damage", ["garbage", "truncated", "offsets"])
def test_damaged_file_reads_as_missing(tmp_path, damage):
    f = tmp_path / "data.npz"
    T.save_data(f, _items(), "a" * 64)
    if damage == "garbage":
        f.write_bytes(b"\x00" * 100)
    elif damage == "truncated":
        f.write_bytes(f.read_bytes()[:-200])
    else:
        with np.load(f, allow_pickle=False) as z:
            d = dict(z)
        d["z_offsets"] = d["z_offsets"][:-1]
        with open(f, "wb") as fh:
            np.savez(fh, **d)
    assert T.read_data(f) is None


class _Trap:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_corrupt_cache_is_rebuilt_and_a_pickle_is_never_read(tmp_path, monkeypatch):
    """load_data finds the .npz corrupt and makes the data again (here: make_data writes known items — running the
    voice as teacher needs the optional onnx package), and never opens a pickle."""
    monkeypatch.setattr(T, "CACHE", tmp_path)
    monkeypatch.setattr(T, "_voice", lambda: (None, "c" * 64))
    calls = []

    def make_data(n, seed=0):
        calls.append(n)
        T.save_data(tmp_path / T.DATA_FILE, _items()[:n], "c" * 64)

    monkeypatch.setattr(T, "make_data", make_data)
    marker = tmp_path / "unpickled"
    (tmp_path / "data.pkl").write_bytes(pickle.dumps({"rate": 1, "items": _Trap(marker)}))  # the old cache name
    (tmp_path / T.DATA_FILE).write_bytes(b"PK\x03\x04 corrupt")
    d = T.load_data(n=1)
    assert calls == [1] and [x["text"] for x in d["items"]] == ["Grüße, Welt."]
    assert len(T.load_data(n=1)["items"]) == 1 and calls == [1]  # now read from the cache
    assert not marker.exists()
    T.save_data(tmp_path / T.DATA_FILE, _items(), "d" * 64)  # another voice: rebuilt
    T.load_data(n=2)
    assert calls == [1, 2]
