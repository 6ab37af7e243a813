"""Layout rules checked on the source: one speculative core (each acceptance rule, LCP and softmax defined once, in
engine/verify.py), tts/ imports nothing from engine/, and nothing in the product reads a pickle."""

import ast

from .conftest import ROOT

CORE = ROOT / "engine" / "verify.py"
RULES = {"greedy", "greedy_tree", "top_k", "prob_threshold", "threshold_accepted", "biased", "sd_step", "pcg_step",
         "pcg_residual", "sample_categorical", "sync_cache"}  # module-level functions (methods may share a name)
ANYWHERE = {"softmax", "_softmax", "log_softmax", "common_prefix", "lcp", "_lcp"}  # no function or method


def _modules(*dirs):
    for d in dirs:
        for f in sorted((ROOT / d).rglob("*.py")):
            yield f, ast.parse(f.read_text(encoding="utf-8"))


def _imports(tree):
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            yield from (a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom):
            yield ("." * n.level) + (n.module or "")


def test_each_rule_lcp_and_softmax_is_defined_once_in_the_core():
    where: dict[str, list[str]] = {}
    fn = (ast.FunctionDef, ast.AsyncFunctionDef)
    for f, tree in _modules("engine", "tts", "audio", "app"):
        top = [n for n in tree.body if isinstance(n, fn) and n.name in RULES]
        anywhere = [n for n in ast.walk(tree) if isinstance(n, fn) and n.name in ANYWHERE]
        for n in top + anywhere:
            where.setdefault(n.name, []).append(str(f.relative_to(ROOT)))
    assert {k: v for k, v in where.items() if v != ["engine/verify.py"]} == {}
    assert RULES | {"softmax", "log_softmax", "common_prefix"} <= set(where)


def test_speculative_algorithms_import_the_core():
    for name in ("ssd_asr", "specasr", "ssbd", "pcg", "predgen", "generate"):
        tree = ast.parse((ROOT / "engine" / f"{name}.py").read_text(encoding="utf-8"))
        assert any(m in (".", "engine") for m in _imports(tree)) and "verify" in ast.unparse(tree), name


def test_tts_imports_nothing_from_engine():
    bad = [(str(f.relative_to(ROOT)), m) for f, tree in _modules("tts") for m in _imports(tree)
           if m == "engine" or m.startswith("engine.") or m.startswith("..")]
    assert bad == []


def test_no_pickle_in_the_product():
    bad = [(str(f.relative_to(ROOT)), m) for f, tree in _modules("engine", "tts", "audio", "app")
           for m in _imports(tree) if m.split(".")[0] in ("pickle", "cPickle", "dill", "joblib", "shelve")]
    assert bad == []
