"""The device script (bench/gpu_run.sh → bench/gpu_replay.py) passes its self-test on this CPU with only what the lent
GPU image has: the modules it lacks cannot be imported (SPECVOICE_IMAGE_ONLY=1), and every family's replay of the
committed traces is exact."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_image_only_blocks_what_the_device_lacks():
    code = ("from bench.gpu_replay import image_only; image_only()\n"
            "try:\n    import ctranslate2\nexcept ImportError as e:\n    print('blocked', e)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert "blocked" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("fam", ["asr", "predgen", "ssbd", "pcg"])
def test_every_family_has_a_committed_trace(fam):
    from bench.gpu_replay import FAMILIES, load_trace

    t = load_trace(fam)
    assert t["items"], fam
    assert (ROOT / "bench" / "data" / "replay" / FAMILIES[fam][1]).stat().st_size < 1_000_000


def test_device_script_self_test_on_the_cpu(tmp_path):
    env = dict(os.environ, SUITE_DEVICE="cpu", OUT=str(tmp_path), SPECVOICE_IMAGE_ONLY="1", PYTHON=sys.executable)
    r = subprocess.run(["bash", "bench/gpu_run.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500,
                       check=False)
    dest = tmp_path / "cpu-selftest"
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    info = json.loads((dest / "device.json").read_text())
    assert info["replayed"] and all(j["status"] == "ok" for j in info["jobs"].values()), info["jobs"]
    for fam in ("asr", "predgen", "ssbd", "pcg"):
        res = json.loads((dest / f"replay_{fam}.json").read_text())["replayed"]
        assert res["replayed"] and res["device"] == "cpu"
        for m, s in res["methods"].items():
            assert s["items"] >= 1 and s["exact"] == s["items"], (fam, m, s)
    cost = json.loads((dest / "verify_cost.json").read_text())
    curve = cost["targets"]["whisper-base decoder"]["curve"]
    assert [c["tokens"] for c in curve] == [1, 2, 4, 8, 16, 32, 48] and curve[0]["steps"] == 1.0
    assert (dest / "gpu_run.log").exists()
