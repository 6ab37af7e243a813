"""Each package imports alone in a fresh interpreter, and the two front ends do not import each other."""

import json
import subprocess
import sys

import pytest

from .conftest import ROOT


def _fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("package", ["audio", "tts", "engine", "app", "engine.runtime", "engine.pipeline",
                                     "app.cli", "app.journal", "app.export"])
def test_package_imports_alone(package):
    r = _fresh(f"import {package}")
    assert r.returncode == 0, r.stderr


def test_cli_and_gui_do_not_import_each_other():
    r = _fresh("import json, sys\nimport app.cli\n"
               "print(json.dumps(sorted(m for m in ('app.controller', 'app.main_window') if m in sys.modules)))")
    assert r.returncode == 0 and json.loads(r.stdout) == [], r.stderr
    r = _fresh("import json, sys\nimport app.controller, app.main_window\nprint(json.dumps('app.cli' in sys.modules))")
    assert r.returncode == 0 and json.loads(r.stdout) is False, r.stderr


def test_both_front_ends_build_stages_through_the_engine():
    import app.cli
    import engine.runtime

    assert not hasattr(app.cli, "build_assistant") and not hasattr(app.cli, "build_translator")
    assert callable(engine.runtime.build_assistant) and callable(engine.runtime.build_translator)
    src = (ROOT / "app" / "controller.py").read_text(encoding="utf-8")
    assert "from engine.runtime import build_assistant, build_translator" in src and "app.cli" not in src
