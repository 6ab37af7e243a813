"""The desktop bundle (packaging/specvoice.spec) leaves torch and transformers out: the default configuration must
run without them. Checked by running the real CLI on jfk.flac with both made unimportable."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BLOCK = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            raise ImportError("not in the bundle: " + name)
sys.meta_path.insert(0, Block())
from app.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_default_transcription_runs_without_torch(tmp_path, jfk_path):
    spec = (ROOT / "packaging" / "specvoice.spec").read_text()
    assert '"torch"' in spec and '"transformers"' in spec  # what the bundle excludes
    r = subprocess.run([sys.executable, "-c", BLOCK, "transcribe", str(jfk_path), "--fast", "--out", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "not in the bundle" not in r.stderr
    assert "your country" in r.stdout.lower()
