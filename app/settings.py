"""Settings panel for every threshold, generated from the one configuration tree (engine.config).

Each field gets a widget by its type (spin box with the field's range, check box, choice list, text), a label and a
tooltip naming what it does and its paper (``engine.config.SETTINGS_HELP``). Values persist in QSettings, are
validated on Apply (a bad value is rejected with a message and nothing changes), and Reset restores the defaults.
"""

from __future__ import annotations

from dataclasses import fields

from PySide6.QtCore import QSettings, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFormLayout,
                               QGroupBox, QLabel, QLineEdit, QMessageBox, QScrollArea, QSpinBox, QVBoxLayout, QWidget)

from engine.config import CHOICES, RANGES, SETTINGS_HELP, Config, ConfigError, validate

SECTIONS = ("vad", "asr", "llm", "caption", "tts", "models", "audio")
TITLES = {"vad": "Voice activity", "asr": "Speech recognition", "llm": "Answer (LLM, PredGen)",
          "caption": "Live caption (SSBD)", "tts": "Speech synthesis (TTS, PCG)", "models": "Models",
          "audio": "Devices"}


def load_settings(store: QSettings) -> Config:
    """The Config persisted in ``store`` (unknown or invalid values fall back to the defaults)."""
    cfg = Config()
    over: dict[str, dict] = {}
    for key in SETTINGS_HELP:
        if store.contains(key):
            section, name = key.split(".")
            over.setdefault(section, {})[name] = store.value(key)
    try:
        out = cfg.with_overrides(over)
        validate(out)
        return out
    except ConfigError:
        return cfg


def save_settings(store: QSettings, cfg: Config) -> None:
    for key in SETTINGS_HELP:
        section, name = key.split(".")
        store.setValue(key, getattr(getattr(cfg, section), name))
    store.sync()


class SettingsDialog(QDialog):
    """Edits a :class:`Config`; emits ``applied(Config)`` after a valid Apply/OK."""

    applied = Signal(object)

    def __init__(self, cfg: Config, store: QSettings, parent=None):
        super().__init__(parent)
        self.setWindowTitle("specvoice settings")
        self.store = store
        self.cfg = cfg
        self.widgets: dict[str, QWidget] = {}
        inner = QWidget()
        lay = QVBoxLayout(inner)
        for section in SECTIONS:
            box = QGroupBox(TITLES[section])
            form = QFormLayout(box)
            sub = getattr(cfg, section)
            for f in fields(sub):
                key = f"{section}.{f.name}"
                if key not in SETTINGS_HELP:
                    continue
                label, tip = SETTINGS_HELP[key]
                w = self._widget(key, getattr(sub, f.name))
                w.setToolTip(tip)
                w.setObjectName(key)
                lbl = QLabel(label)
                lbl.setToolTip(tip)
                form.addRow(lbl, w)
                self.widgets[key] = w
            lay.addWidget(box)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(inner)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Apply | QDialogButtonBox.Cancel
                                   | QDialogButtonBox.RestoreDefaults)
        buttons.accepted.connect(self._ok)
        buttons.rejected.connect(self.reject)
        buttons.button(QDialogButtonBox.Apply).clicked.connect(self.apply)
        buttons.button(QDialogButtonBox.RestoreDefaults).clicked.connect(self.reset)
        self.buttons = buttons
        outer = QVBoxLayout(self)
        outer.addWidget(scroll)
        outer.addWidget(buttons)
        self.resize(560, 720)

    def _widget(self, key: str, value) -> QWidget:
        if key in CHOICES:
            w = QComboBox()
            w.addItems(list(CHOICES[key]))
            w.setCurrentText(str(value))
            return w
        if isinstance(value, bool):
            w = QCheckBox()
            w.setChecked(value)
            return w
        if isinstance(value, int):
            w = QSpinBox()
            lo, hi = RANGES.get(key, (-10**6, 10**6))
            w.setRange(int(lo), int(hi))
            w.setValue(value)
            return w
        if isinstance(value, float):
            w = QDoubleSpinBox()
            lo, hi = RANGES.get(key, (-1e6, 1e6))
            w.setDecimals(3)
            w.setSingleStep(0.05)
            w.setRange(lo, hi)
            w.setValue(value)
            return w
        w = QLineEdit(str(value))
        return w

    def set_value(self, key: str, value) -> None:
        w = self.widgets[key]
        if isinstance(w, QComboBox):
            w.setCurrentText(str(value))
        elif isinstance(w, QCheckBox):
            w.setChecked(bool(value))
        elif isinstance(w, (QSpinBox, QDoubleSpinBox)):
            w.setValue(value)
        else:
            w.setText(str(value))

    def _value(self, key: str):
        w = self.widgets[key]
        if isinstance(w, QComboBox):
            return w.currentText()
        if isinstance(w, QCheckBox):
            return w.isChecked()
        if isinstance(w, (QSpinBox, QDoubleSpinBox)):
            return w.value()
        return w.text()

    def current(self) -> Config:
        """The Config in the widgets.

        Raises:
            ConfigError: a value outside its range or choices.
        """
        over: dict[str, dict] = {}
        for key in self.widgets:
            section, name = key.split(".")
            over.setdefault(section, {})[name] = self._value(key)
        cfg = self.cfg.with_overrides(over)
        validate(cfg)
        return cfg

    def apply(self) -> bool:
        try:
            cfg = self.current()
        except ConfigError as e:
            QMessageBox.warning(self, "Invalid setting", str(e))
            return False
        self.cfg = cfg
        save_settings(self.store, cfg)
        self.applied.emit(cfg)
        return True

    def _ok(self) -> None:
        if self.apply():
            self.accept()

    def reset(self) -> None:
        d = Config()
        for key in self.widgets:
            section, name = key.split(".")
            self.set_value(key, getattr(getattr(d, section), name))
