"""Each package imports alone in a fresh interpreter, and the two front ends do not import each other."""

import ast
import json
import subprocess
import sys

import pytest

from .conftest import ROOT


def _fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("package", ["audio", "engine", "engine.synthesis", "app", "engine.runtime", "engine.pipeline",
                                     "app.cli", "engine.journal", "app.export"])
def test_package_imports_alone(package):
    r = _fresh(f"import {package}")
    assert r.returncode == 0, r.stderr


def test_cli_and_gui_do_not_import_each_other():
    r = _fresh("import json, sys\nimport app.cli\n"
               "print(json.dumps(sorted(m for m in ('app.controller', 'app.main_window') if m in sys.modules)))")
    assert r.returncode == 0 and json.loads(r.stdout) == [], r.stderr
    r = _fresh("import json, sys\nimport app.controller, app.main_window\nprint(json.dumps('app.cli' in sys.modules))")
    assert r.returncode == 0 and json.loads(r.stdout) is False, r.stderr


# what wiring a conversation takes: a front end that names one of these builds a stage itself
WIRING = {"build_assistant", "build_translator", "Conversation", "CaptionLoop", "EchoGatedVAD", "echo_source",
          "EchoCancelledSource", "BargeInDetector", "StreamingVAD", "vad", "transcriber", "Journal", "EventQueue",
          "open_player", "write_wav"}


def _names(tree) -> set[str]:
    """Every name a module imports, reads or calls as an attribute (``rt.vad()`` gives "vad")."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            out.update(a.name for a in n.names)
        elif isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out


def test_both_front_ends_run_the_session_engine_and_wire_nothing_themselves():
    from .test_core_layout import _graph

    graph = _graph()
    for front in ("app.cli", "app.controller"):
        assert "engine.session" in graph[front], front
        tree = ast.parse((ROOT / (front.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
        assert _names(tree) & WIRING == set(), front
    # the check sees wiring where there is some: the session engine itself names these
    engine_names = _names(ast.parse((ROOT / "engine" / "session.py").read_text(encoding="utf-8")))
    assert {"build_assistant", "build_translator", "EchoGatedVAD", "echo_source", "transcriber"} <= engine_names
