"""Defaults live in engine/config.py only.

Every class of the engine whose constructor takes a setting either has no default for it (the caller passes the
configured value), takes its configuration section, or defaults to the setting's declared default: a caller that
leaves a setting out gets what the configuration would give, never a second, older default.

Which parameter is which setting:

* :data:`RENAMES`: a parameter named otherwise than its setting (``WindowPolicy(margin_s=)`` is
  ``asr.encoder_margin_s``), or named like another setting than its own (``PredGen(max_tokens=)`` is
  ``llm.max_answer_tokens``, not ``caption.max_tokens``);
* a name that fields of several sections have (``device``, ``method``, ``model_role``) is the setting of the
  section the class belongs to (:data:`PACKAGE_SECTION`: by its package), and no setting elsewhere;
* a name that one section's field has is that setting wherever it appears;
* :data:`NOT_SETTINGS`: parameters so named that are not the setting (a result's field, a resolved value), each
  with the reason.

A default of None for a text setting whose declared default is "" is the same value: both mean "none".
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil

import pytest

import engine
from engine.config import SECTIONS, SETTINGS, Config

#: the section a package's (or module's) classes belong to; the longest matching prefix wins
PACKAGE_SECTION = {
    "engine.asr": "asr",
    "engine.pipeline": "asr",
    "engine.translate": "caption",
    "engine.answer": "llm",
    "engine.llm": "llm",
    "engine.synthesis": "tts",
}

_SSD = {"rejoin": "asr.ssd_rejoin"}
_SPECASR = {"threshold": "asr.specasr_threshold", "max_draft": "asr.specasr_max_draft"}
_ANSWER = {"max_tokens": "llm.max_answer_tokens"}
_PREDGEN = {**_ANSWER, "verifier": "llm.predgen_verifier", "top_k": "llm.predgen_top_k",
            "tokens_per_update": "llm.predgen_tokens_per_update",
            "speculation_threads": "llm.predgen_speculation_threads"}
_TRANSLATOR = {"target": "caption.target_language"}
_HTTP = {"timeout_s": "llm.remote_timeout_s", "retries": "llm.remote_retries"}

#: class name → {parameter: the setting it takes}, where the name is not the setting's (classes by name, so that a
#: class moved to another module keeps its entry)
RENAMES: dict[str, dict[str, str]] = {
    "SSDDecoder": _SSD,
    "SSDBackend": _SSD,
    "SpecASR": _SPECASR,
    "SpecASRBackend": {**_SPECASR, "tree": "asr.specasr_tree"},
    "WindowPolicy": {"mode": "asr.encoder_window", "margin_s": "asr.encoder_margin_s", "min_s": "asr.encoder_min_s"},
    "DecodeGuard": {"tokens_per_s": "asr.guard_tokens_per_s", "tokens_base": "asr.guard_tokens_base",
                    "compression_ratio": "asr.guard_compression_ratio", "logprob": "asr.guard_logprob",
                    "no_speech": "asr.guard_no_speech"},
    "WhisperSSD": {"lid_head": "asr.language_head"},
    "TorchWhisper": {"threads": "asr.cpu_threads"},
    "Assistant": _ANSWER,
    "PredGenAssistant": _PREDGEN,
    "PredGen": _PREDGEN,
    "ChatHistory": {"max_tokens": "llm.max_answer_tokens"},
    "Translator": _TRANSLATOR,
    "SSBDTranslator": {**_TRANSLATOR, "display_only": "caption.display_only_mask"},
    "ARRetranslator": _TRANSLATOR,
    "RemoteLM": {"api": "llm.remote_api", "top_n": "llm.remote_top_n", **_HTTP},
    "HttpClient": _HTTP,
}

_RESULT_LANGUAGE = "the language an utterance was heard in (a result), not the asr.language setting"

#: (class name, parameter) → why that parameter is not the setting of its name; class "*" = every class
NOT_SETTINGS: dict[tuple[str, str], str] = {
    ("*", "device"): "a resolved device (engine.devices.resolve_device: 'cpu', 'cuda'), not the auto/cpu/cuda "
                     "setting",
    ("PartialTranscript", "language"): _RESULT_LANGUAGE,
    ("FinalTranscript", "language"): _RESULT_LANGUAGE,
    ("RevisedTranscript", "language"): _RESULT_LANGUAGE,
    ("SpokenUtterance", "language"): _RESULT_LANGUAGE,
    ("UtteranceRecord", "language"): _RESULT_LANGUAGE,
    ("BackendCapabilities", "language"): "whether a backend can decode in a given language (a capability)",
    ("SessionLanguage", "language"): "the language the session has settled on so far (state; None = none yet)",
    ("LlmPlacement", "n_gpu_layers"): "the layers a placement decision offloads (a result of llm.n_gpu_layers and "
                                      "the machine)",
    ("SSDBackend", "method"): "which of the two methods this class implements ('ssd' or 'ar_torch'); the "
                              "setting's default 'ar' is another class (WhisperARBackend)",
    ("SpecASRBackend", "method"): "SpecASR's own variant ('tree' or 'recycling'), not asr.method",
    ("CodecLMSession", "backend"): "the codec LM's runtime (onnx or torch), not llm.backend",
    ("SessionOptions", "source"): "the audio input (open_source's spec; '' = the configured microphone), not "
                                  "caption.source",
    ("Session", "source"): "the audio input already opened (None = the options' source), not caption.source",
    ("SentenceSplitter", "first_clause_words"): "0 = whole sentences, what PredGen splits the rest of an answer "
                                                "with; the answer stages pass tts.first_clause_words for the first "
                                                "piece",
    ("SessionOptions", "target_language"): "'' = caption.target_language, read from the session's Config",
    ("SessionOptions", "echo_cancellation"): "None = duplex.echo_cancellation where it applies, read from the "
                                             "session's Config",
}

#: each section's field names
FIELDS = {sec: {f.name for f in dataclasses.fields(type(getattr(Config(), sec)))} for sec in SECTIONS}


def section_of(module: str) -> str | None:
    """The section the classes of ``module`` belong to (:data:`PACKAGE_SECTION`), None for none."""
    best = None
    for prefix, sec in PACKAGE_SECTION.items():
        if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, sec)
    return best[1] if best else None


def setting_of(cls_name: str, param: str, section: str | None) -> str | None:
    """The key of the setting parameter ``param`` of class ``cls_name`` (in ``section``) takes, None if none."""
    if ("*", param) in NOT_SETTINGS or (cls_name, param) in NOT_SETTINGS:
        return None
    if param in RENAMES.get(cls_name, {}):
        return RENAMES[cls_name][param]
    if section is not None and param in FIELDS[section]:
        return f"{section}.{param}"
    owners = [sec for sec in SECTIONS if param in FIELDS[sec]]
    return f"{owners[0]}.{param}" if len(owners) == 1 else None


def same_default(default, declared) -> bool:
    """Whether a parameter's ``default`` is the ``declared`` default (None and "" both mean none; a bool equals
    only a bool)."""
    if default is None and declared == "":
        return True
    if isinstance(default, bool) or isinstance(declared, bool):
        return default is declared
    return default == declared


def parameters(cls: type) -> list[inspect.Parameter]:
    """The constructor parameters of ``cls``; none where it has no inspectable constructor (a builtin base)."""
    try:
        return list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        return []


def violations(cls: type, section: str | None) -> list[str]:
    """``"Class(param=default): section.key declares declared"`` for each constructor parameter of ``cls`` that
    takes a setting and defaults to something else than the setting's declared default."""
    out = []
    for p in parameters(cls):
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is p.empty:
            continue
        key = setting_of(cls.__name__, p.name, section)
        if key is None:
            continue
        declared = SETTINGS[key].default
        if not same_default(p.default, declared):
            out.append(f"{cls.__module__}.{cls.__qualname__}({p.name}={p.default!r}): {key} declares {declared!r}")
    return out


def engine_classes() -> list[type]:
    """Every class defined in a module of the engine (engine.config itself, the declaration, aside)."""
    classes = []
    for info in pkgutil.walk_packages(engine.__path__, "engine."):
        if info.name == "engine.config":
            continue
        module = importlib.import_module(info.name)
        classes += [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == info.name]
    return classes


@pytest.fixture(scope="module")
def classes() -> list[type]:
    return engine_classes()


def test_every_setting_parameter_defaults_to_the_declared_default(classes):
    found = sorted(v for cls in classes for v in violations(cls, section_of(cls.__module__)))
    assert not found, f"{len(found)} constructor defaults differ from engine/config.py:\n" + "\n".join(found)


def test_the_walk_reaches_the_configured_classes(classes):
    """Not vacuous: the walk imports the engine's classes, with the settings they take."""
    names = {c.__name__ for c in classes}
    assert {"StreamingTranscriber", "SSBDTranslator", "PredGen", "LlamaCppLM", "WindowPolicy"} <= names
    checked = {(c.__name__, p.name) for c in classes for p in parameters(c)
               if setting_of(c.__name__, p.name, section_of(c.__module__)) is not None}
    assert ("SSBDTranslator", "mask_k") in checked and ("LlamaCppLM", "n_ctx") in checked


def test_every_mapping_names_a_setting_and_a_parameter(classes):
    """The tables above stay true: each names an existing setting, and a class of that name with that parameter
    (a class that now takes its section, or was renamed or removed, leaves a stale entry: it is named here)."""
    have: dict[str, set[str]] = {}  # class name → parameters of the classes so named
    for c in classes:
        have.setdefault(c.__name__, set()).update(p.name for p in parameters(c))
    stale = [(cls_name, param) for cls_name, params in RENAMES.items() for param in params
             if param not in have.get(cls_name, ())]
    stale += [(cls_name, param) for cls_name, param in NOT_SETTINGS
              if cls_name != "*" and param not in have.get(cls_name, ())]
    assert stale == []
    assert [key for params in RENAMES.values() for key in params.values() if key not in SETTINGS] == []


# -- the check can fail ---------------------------------------------------------------------------------------------
class _Translator:
    """A translator whose mask_k default is not caption.mask_k's, in the caption section."""

    def __init__(self, lm, target: str = "German", max_tokens: int = 96, mask_k: int = 3, beta: float = 0.2,
                 tokenizer=None, model_role: str = "llm_target"):
        pass


class _Answer:
    """A setting without a default (system_prompt), a renamed one (max_tokens is llm.max_answer_tokens), a name
    several sections have (model_role: llm's in the llm section, no setting outside a section), and a resolved
    device (NOT_SETTINGS)."""

    def __init__(self, system_prompt: str, max_tokens: int = 96, model_role: str = "whatever", device: str = "cpu"):
        pass


@dataclasses.dataclass
class _Record:
    threshold: float = 0.9  # a field named like vad.threshold, the only section with it


def test_a_mismatched_default_is_caught():
    found = violations(_Translator, "caption")
    assert len(found) == 1 and "_Translator(mask_k=3): caption.mask_k declares 5" in found[0]
    assert violations(_Translator, "llm") == [found[0]]  # model_role is llm's too, and llm_target is its default
    RENAMES["_Answer"] = {"max_tokens": "llm.max_answer_tokens"}
    try:
        assert [v.split(": ", 1)[1] for v in violations(_Answer, "llm")] == [
            "llm.max_answer_tokens declares 256", "llm.model_role declares 'llm_target'"]
        assert [v.split(": ", 1)[1] for v in violations(_Answer, None)] == ["llm.max_answer_tokens declares 256"]
    finally:
        del RENAMES["_Answer"]
    assert violations(_Record, None) == [f"{__name__}._Record(threshold=0.9): vad.threshold declares 0.5"]


def test_none_is_an_empty_text_setting_and_bools_are_not_numbers():
    assert same_default(None, "") and same_default("", "") and not same_default(None, "en")
    assert same_default(True, True) and not same_default(1, True) and not same_default(False, 0.0)
    assert same_default(1, 1.0) and not same_default(0.0, 2.0)
