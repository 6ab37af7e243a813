"""Layout rules checked on the source: one speculative core (each acceptance rule, LCP and softmax defined once, in
engine/core/verify.py), imports point one way without circles, and nothing in the product reads a pickle."""

import ast

from .conftest import ROOT

CORE = ROOT / "engine" / "core" / "verify.py"
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
    for f, tree in _modules("engine", "audio", "app"):
        top = [n for n in tree.body if isinstance(n, fn) and n.name in RULES]
        anywhere = [n for n in ast.walk(tree) if isinstance(n, fn) and n.name in ANYWHERE]
        for n in top + anywhere:
            where.setdefault(n.name, []).append(str(f.relative_to(ROOT)))
    assert {k: v for k, v in where.items() if v != ["engine/core/verify.py"]} == {}
    assert RULES | {"softmax", "log_softmax", "common_prefix"} <= set(where)


def test_speculative_algorithms_import_the_core():
    """Each algorithm module imports the acceptance core (in the import graph, not in its text)."""
    graph = _graph()
    for name in ("asr.ctc_self_speculative", "asr.draft_model_speculative", "translate.biased_retranslation",
                 "synthesis.coarse_grained_sampling", "answer.predictive", "llm.generate"):
        assert "engine.core.verify" in graph[f"engine.{name}"], name


def test_no_pickle_in_the_product():
    bad = [(str(f.relative_to(ROOT)), m) for f, tree in _modules("engine", "audio", "app")
           for m in _imports(tree) if m.split(".")[0] in ("pickle", "cPickle", "dill", "joblib", "shelve")]
    assert bad == []


PACKAGES = ("app", "engine", "audio", "bench", "assets")
LAYER = {"app": 3, "bench": 3, "assets": 3, "engine": 2, "audio": 1}  # imports point to a lower layer


def _module_name(f):
    parts = list(f.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph():
    """Module → product modules it imports (function-level imports included: they close circles too)."""
    files = {_module_name(f): f for d in PACKAGES for f in (ROOT / d).rglob("*.py")}
    graph = {}
    for name, f in files.items():
        pkg = name if f.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for n in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            mods = []
            if isinstance(n, ast.Import):
                mods = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                base = n.module or ""
                if n.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - (n.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                mods = [base] + [f"{base}.{a.name}" for a in n.names]
            for m in mods:
                while m and m not in files:
                    m = m.rpartition(".")[0]
                if m and m != name:
                    deps.add(m)
        graph[name] = deps
    return graph


def _cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    graph = _graph()
    # a package's __init__ importing its own modules is not a circle through the package
    for name in graph:
        graph[name] = {d for d in graph[name] if not name.startswith(d + ".")}
    assert _cycles(graph) == []


def test_imports_point_one_way():
    """app → engine → audio (bench sits beside app); nothing imports upward."""
    def top(m):
        return m.split(".")[0]

    bad = [(m, d) for m, deps in _graph().items() for d in deps
           if LAYER[top(d)] > LAYER[top(m)]
           or (LAYER[top(d)] == LAYER[top(m)] < 3 and top(d) != top(m))]
    assert bad == []


def test_the_circle_check_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
