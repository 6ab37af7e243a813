"""Every setting declared once (engine.config field metadata), and everything generated from that declaration: the
TOML file, the environment, ``--set`` and its errors, and the desktop app's settings dialog (offscreen), which loads
the same configuration as the CLI with the user's stored edits on top."""

import dataclasses
import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from engine import config as C  # noqa: E402
from engine.config import SETTINGS, Config, ConfigError, load_config  # noqa: E402

# text settings whose value is free (a path, a URL, a name, a prompt); every other text setting is a fixed set
FREE_TEXT = {"models.asr_target", "models.asr_draft", "models.llm_target", "models.llm_draft", "models.tts_voice",
             "models.vad", "models.cache_dir", "models.dir", "audio.input_device", "audio.output_device",
             "llm.system_prompt", "llm.base_url", "llm.model", "llm.api_key_env", "llm.tokenizer",
             "asr.languages",  # a list of Whisper codes, each checked (check_combination)
             "tts.voices",  # language=voice pairs, each checked (check_combination)
             "duplex.wake_phrase"}  # any words the user chooses


@pytest.fixture(autouse=True)
def _no_outside_configuration(monkeypatch, tmp_path):
    """No configuration file or SPECVOICE_* setting of the machine running the tests leaks in."""
    for name in list(os.environ):
        if name.startswith("SPECVOICE_") and name not in ("SPECVOICE_SHARED", "SPECVOICE_CACHE"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


# -- one declaration per setting ---------------------------------------------------------------------------------
def test_every_setting_is_declared_once_with_complete_metadata():
    declared = [f"{sec.name}.{f.name}" for sec in dataclasses.fields(Config) for f in dataclasses.fields(
        sec.default_factory)]
    assert declared == list(SETTINGS) and len(set(declared)) == len(declared)
    for name in ("SETTINGS_HELP", "CHOICES", "RANGES"):  # the parallel tables are gone
        assert not hasattr(C, name), name
    problems = []
    for key, s in SETTINGS.items():
        if not s.label or len(s.help) < 15:
            problems.append(f"{key}: no label or help")
        if s.type in (int, float) and s.range is None and s.choices is None:
            problems.append(f"{key}: a number without a range")
        if s.type is str and s.choices is None and key not in FREE_TEXT:
            problems.append(f"{key}: text without choices")
        if s.range is not None and s.range[0] >= s.range[1]:
            problems.append(f"{key}: empty range {s.range}")
        try:
            s.check(s.default)
        except ConfigError as e:
            problems.append(f"{key}: default refused: {e}")
    assert not problems, "\n".join(problems)
    assert set(C.SECTIONS) == {"models", "audio", "vad", "asr", "llm", "caption", "tts", "duplex"}
    assert all(C.TITLES[s] for s in C.SECTIONS)


def test_device_and_model_folder_settings():
    for fam in ("asr", "llm", "tts"):
        s = SETTINGS[f"{fam}.device"]
        assert s.default == "auto" and s.choices == ("auto", "cpu", "cuda")
    assert SETTINGS["models.dir"].default == "" and SETTINGS["models.dir"].type is str
    cfg = load_config(None, None, ["llm.device=cuda", "tts.device=cpu", "models.dir=/srv/models"])
    assert (cfg.llm.device, cfg.tts.device, cfg.models.dir) == ("cuda", "cpu", "/srv/models")
    with pytest.raises(ConfigError, match=r"^tts\.device: 'gpu' is not one of auto, cpu, cuda$"):
        load_config(None, None, ["tts.device=gpu"])


def test_asr_language_accepts_auto_and_every_whisper_language():
    fw = pytest.importorskip("faster_whisper.tokenizer")
    # yue is a large-v3 token only: the shipped Whisper base has none
    assert set(C.WHISPER_LANGUAGES) == set(fw._LANGUAGE_CODES) - {"yue"}
    assert SETTINGS["asr.language"].default == "en"
    for lang in ("auto", "de", "fr", "haw"):
        assert load_config(None, None, [f"asr.language={lang}"]).asr.language == lang
    with pytest.raises(ConfigError) as e:
        load_config(None, None, ["asr.language=xx"])
    assert str(e.value).startswith("asr.language: 'xx' is not one of auto, en, ")


def test_the_language_lists_name_every_choice_of_the_settings():
    """engine.translate.languages lists (code, name) of the caption targets and of the spoken languages: the codes
    the settings accept, each with its English name (what a language box shows)."""
    from engine.translate.languages import caption_targets, whisper_languages

    targets, spoken = caption_targets(), whisper_languages()
    assert [c for c, _ in targets] == list(SETTINGS["caption.target_language"].choices)
    assert ("de", "German") in targets and ("ru", "Russian") in targets and ("en", "English") in targets
    assert [c for c, _ in spoken] == list(C.WHISPER_LANGUAGES)
    assert ("en", "English") in spoken and ("ko", "Korean") in spoken and ("haw", "Hawaiian") in spoken
    assert all(name and name[0].isupper() for _, name in targets + spoken)
    tok = pytest.importorskip("transformers.models.whisper.tokenization_whisper")
    assert all(tok.LANGUAGES[c] == name.lower() for c, name in spoken)  # Whisper's own names


def test_file_environment_and_set_in_that_order(tmp_path, monkeypatch):
    toml = tmp_path / "c.toml"
    toml.write_text('[vad]\nthreshold = 0.4\nmin_silence_s = 0.9\n[duplex]\nend_of_turn = "smart_turn"\n')
    monkeypatch.setenv("SPECVOICE_VAD_THRESHOLD", "0.3")  # generated name of vad.threshold
    monkeypatch.setenv("SPECVOICE_ASR_SPECASR_TREE", "off")
    cfg = load_config(toml)
    assert (cfg.vad.threshold, cfg.vad.min_silence_s, cfg.duplex.end_of_turn) == (0.3, 0.9, "smart_turn")
    assert cfg.asr.specasr_tree is False
    assert load_config(toml, None, ["vad.threshold=0.35"]).vad.threshold == 0.35
    assert SETTINGS["vad.threshold"].env == "SPECVOICE_VAD_THRESHOLD"


@pytest.mark.parametrize("item, message", [
    ("asr.language=xx", "asr.language: 'xx' is not one of auto, en, zh, de, "),
    ("caption.target_language=Klingon", "caption.target_language: 'Klingon' is not a code or English name of "
                                        "de/German"),
    ("vad.threshold=7", "vad.threshold: 7.0 is outside 0.05..0.95"),
    ("asr.languages=en,xx", "asr.languages: 'xx' is not a Whisper language code"),
    ("vad.threshold=loud", "vad.threshold: expected float, got 'loud'"),
    ("llm.max_answer_tokens=1.5", "llm.max_answer_tokens: expected int, got '1.5'"),
    ("vad.loudness=3", "vad.loudness: unknown config key (vad has: threshold, min_silence_s"),
    ("threshold=3", "--set expects section.key=value, got 'threshold=3'"),
])
def test_a_bad_set_is_one_line_and_exit_2(tmp_path, capsys, item, message):
    from app.cli import main

    rc = main(["transcribe", "x.wav", "--set", item, "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("specvoice: error: " + message), err[0]
    assert "Error" not in err[0] and "Traceback" not in err[0]  # no exception name


def test_a_bad_environment_value_or_config_file_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    from app.cli import main

    monkeypatch.setenv("SPECVOICE_CAPTION_TARGET_LANGUAGE", "klingon")
    assert main(["caption", "x.wav", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("specvoice: error: caption.target_language: 'klingon' is not ")
    monkeypatch.delenv("SPECVOICE_CAPTION_TARGET_LANGUAGE")
    bad = tmp_path / "bad.toml"
    bad.write_text("[asr]\nmethod = 'fastest'\n")
    assert main(["app", "--config", str(bad)]) == 2  # before any window opens
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["specvoice: error: asr.method: 'fastest' is not one of auto, ssd, specasr, ar, ar_torch"]


# -- the desktop app ---------------------------------------------------------------------------------------------
pytest.importorskip("PySide6")
from PySide6.QtCore import QPoint, QPointF, QSettings, Qt  # noqa: E402
from PySide6.QtGui import QWheelEvent  # noqa: E402
from PySide6.QtWidgets import QApplication, QMessageBox  # noqa: E402


@pytest.fixture()
def store(tmp_path):
    return QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat)


@pytest.fixture()
def no_model_load(monkeypatch):
    """The window's model load is not what these tests are about: it does nothing."""
    from app.controller import EngineController

    monkeypatch.setattr(EngineController, "load", lambda self, mode="assistant": None)


def _window(qtbot, tmp_path, store, config_path=None):
    from app.main_window import MainWindow

    w = MainWindow(None, store, history_path=tmp_path / "history.jsonl", config_path=config_path)
    qtbot.addWidget(w)
    return w


def test_gui_and_cli_give_the_same_configuration(qtbot, tmp_path, store, monkeypatch, no_model_load):
    from app import cli_options as cli
    from app.settings import load_settings

    toml = tmp_path / "my.toml"
    toml.write_text('[asr]\nmodel_role = "asr_draft"\nmin_chunk_s = 0.8\n[caption]\ntarget_language = "fr"\n'
                    '[duplex]\nturn_threshold = 0.7\n')
    monkeypatch.setenv("SPECVOICE_VAD_MIN_SILENCE_S", "0.9")
    monkeypatch.setenv("SPECVOICE_MODEL_LLM_TARGET", "/srv/models/qwen.gguf")
    cli_cfg = cli.config_from_args(cli.parser().parse_args(["transcribe", "x.wav", "--config", str(toml)]))
    assert cli_cfg.asr.model_role == "asr_draft" and cli_cfg.vad.min_silence_s == 0.9
    assert cli_cfg != Config()
    w = _window(qtbot, tmp_path, store, str(toml))
    assert w.ctl.cfg == cli_cfg and load_settings(store, str(toml)) == cli_cfg
    w.close()
    # $SPECVOICE_CONFIG names the file for both
    monkeypatch.setenv("SPECVOICE_CONFIG", str(toml))
    from_cli = cli.config_from_args(cli.parser().parse_args(["transcribe"]))
    assert _window(qtbot, tmp_path, store).ctl.cfg == from_cli == cli_cfg
    # a dialog edit lies on top of the file: the GUI equals the CLI with that --set
    store.setValue("caption.target_language", "es")
    edited = cli.config_from_args(cli.parser().parse_args(["transcribe", "--set", "caption.target_language=es"]))
    assert _window(qtbot, tmp_path, store).ctl.cfg == edited and edited.caption.target_language == "es"


def test_specvoice_app_passes_its_config_file_to_the_window(tmp_path, monkeypatch):
    from app import cli, main_window

    seen = []
    monkeypatch.setattr(main_window, "run_app", lambda argv=None, config_path=None: seen.append(config_path) or 0)
    toml = tmp_path / "my.toml"
    toml.write_text("[vad]\nthreshold = 0.4\n")
    assert cli.main(["app", "--config", str(toml)]) == 0 and seen == [str(toml)]


def test_every_section_is_in_the_dialog_and_duplex_edits(qtbot, store):
    from app.settings import SettingsDialog, load_settings

    base = Config()
    dlg = SettingsDialog(base, store, base=base)
    qtbot.addWidget(dlg)
    assert set(dlg.widgets) == set(SETTINGS) and set(dlg.groups) == set(C.SECTIONS)
    duplex = [k for k in SETTINGS if k.startswith("duplex.")]
    assert len(duplex) == 14
    for key in duplex:  # each duplex field is a widget inside the duplex group, with its help as tooltip
        w = dlg.widgets[key]
        assert dlg.groups["duplex"].isAncestorOf(w) and w.toolTip().startswith(SETTINGS[key].help)
    applied = []
    dlg.applied.connect(applied.append)
    dlg.widgets["duplex.end_of_turn"].setCurrentText("llm")
    dlg.widgets["duplex.eot_threshold"].setValue(0.35)
    dlg.widgets["duplex.turn_threshold"].setValue(0.7)
    dlg.widgets["duplex.echo_cancellation"].setChecked(False)
    dlg.widgets["duplex.input_latency_ms"].setValue(150.0)
    assert dlg.apply()
    d = applied[-1].duplex
    assert (d.end_of_turn, d.eot_threshold, d.turn_threshold, d.echo_cancellation, d.input_latency_ms) == (
        "llm", 0.35, 0.7, False, 150.0)
    # only the edits are stored, and they load back
    assert set(store.allKeys()) == {"duplex.end_of_turn", "duplex.eot_threshold", "duplex.turn_threshold",
                                    "duplex.echo_cancellation", "duplex.input_latency_ms"}
    assert load_settings(store).duplex == d
    dlg.reset()  # back to the base: nothing stored after Apply
    assert dlg.apply() and store.allKeys() == []


def test_a_bad_stored_value_falls_back_alone_and_is_reported(qtbot, tmp_path, store, no_model_load):
    from app.settings import load_settings

    store.setValue("vad.threshold", "loud")
    store.setValue("asr.language", "xx")
    store.setValue("llm.max_answer_tokens", 40)  # valid: kept
    store.setValue("caption.beta", 0.5)  # valid: kept
    store.setValue("asr.old_setting", 1)  # a setting that no longer exists
    store.setValue("llm.backend", "remote")  # valid alone, but there is no server URL
    store.sync()
    reports: list[str] = []
    cfg = load_settings(store, None, reports.append)
    assert cfg.llm.max_answer_tokens == 40 and cfg.caption.beta == 0.5
    assert cfg.vad.threshold == Config().vad.threshold and cfg.asr.language == "en" and cfg.llm.backend == "local"
    assert len(reports) == 4, reports
    assert any("vad.threshold" in r and "'loud'" in r for r in reports)
    assert any("asr.language: 'xx' is not one of" in r for r in reports)
    assert any("asr.old_setting" in r for r in reports)
    assert any("llm.backend" in r and "llm.base_url" in r for r in reports)
    # the window says so on its settings line, and runs with the rest of the edits
    w = _window(qtbot, tmp_path, store)
    assert w.ctl.cfg == cfg and w.settings_warnings == reports
    assert not w.settings_note.isHidden() and "vad.threshold" in w.settings_note.text()


def test_an_invalid_value_is_refused_in_place_with_the_reason(qtbot, store, monkeypatch):
    from app.settings import SettingsDialog

    monkeypatch.setattr(QMessageBox, "warning", lambda *a: pytest.fail("a message box instead of the field"))
    dlg = SettingsDialog(Config(), store, base=Config())
    qtbot.addWidget(dlg)
    dlg.show()
    lang = dlg.widgets["caption.target_language"]
    lang.setCurrentText("Klingon")
    err = dlg.errors["caption.target_language"]
    assert not err.isHidden() and err.text().startswith("caption.target_language: 'Klingon' is not")
    assert not dlg.apply() and store.allKeys() == []
    lang.setCurrentText("French")  # a name is accepted as well as a code
    assert err.isHidden() and dlg.apply() and store.value("caption.target_language") == "French"
    # a rule between settings: the field to fix says why
    dlg.widgets["llm.backend"].setCurrentText("remote")
    url_err = dlg.errors["llm.base_url"]
    assert not url_err.isHidden() and "required with llm.backend = remote" in url_err.text()
    assert not dlg.apply()
    dlg.widgets["llm.base_url"].setText("http://127.0.0.1:8000")
    assert url_err.isHidden() and dlg.apply()


def _wheel(widget, steps: int = -1) -> None:
    e = QWheelEvent(QPointF(5, 5), QPointF(widget.mapToGlobal(QPoint(5, 5))), QPoint(0, 0), QPoint(0, 120 * steps),
                    Qt.NoButton, Qt.NoModifier, Qt.NoScrollPhase, False)
    QApplication.sendEvent(widget, e)


def test_the_wheel_changes_a_field_only_when_it_has_focus(qtbot, store):
    from app.settings import SettingsDialog

    dlg = SettingsDialog(Config(), store, base=Config())
    qtbot.addWidget(dlg)
    dlg.show()
    qtbot.waitExposed(dlg)
    combo, spin = dlg.widgets["caption.method"], dlg.widgets["asr.final_beam_size"]
    dlg.buttons.setFocus()
    assert not combo.hasFocus() and not spin.hasFocus()
    before = combo.currentText(), spin.value()
    _wheel(combo)
    _wheel(spin, +1)
    assert (combo.currentText(), spin.value()) == before  # scrolling past them changed nothing
    # with the focus the same wheel changes them (the event reaches the widget)
    dlg.activateWindow()
    combo.setFocus()
    qtbot.waitUntil(combo.hasFocus, timeout=2000)
    _wheel(combo)
    assert combo.currentText() != before[0]
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus, timeout=2000)
    _wheel(spin, +1)
    assert spin.value() == before[1] + 1
