"""The settings dialog and the desktop app's configuration, both generated from the setting declarations
(:data:`engine.config.SETTINGS`).

The app's configuration is the CLI's (:func:`engine.config.load_config`: defaults, the TOML file of ``--config`` /
``$SPECVOICE_CONFIG``, the environment) with the user's dialog edits on top; the edits persist in QSettings, and only
values that differ from that base are stored, so a later change of the file still shows. A stored value that is
no longer valid is reported and only that value falls back.

The dialog has a group per section of :class:`engine.config.Config` and a row per setting: a widget by its type
(spin box with the setting's range, check box, choice list, text), a label with its unit and a tooltip with its help.
A value that is refused is shown in place, under its field, with the reason; Apply/OK then change nothing. Scrolling
the dialog never changes a value: a choice list or spin box takes wheel events only while it has the focus.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFormLayout,
                               QGroupBox, QLabel, QLineEdit, QScrollArea, QSpinBox, QVBoxLayout, QWidget)

from engine.config import (SECTIONS, SETTINGS, TITLES, Config, ConfigError, Setting, apply_edits, check_combination,
                           load_config)

log = logging.getLogger(__name__)

Report = Callable[[str], None]


# -- the configuration ------------------------------------------------------------------------------------------
def stored_edits(store: QSettings) -> dict[str, Any]:
    """The dialog edits in ``store``: ``{"section.key": stored value}`` for every stored key of a settings section
    (an unknown key of a section is kept, so that loading it reports it)."""
    out = {}
    for key in store.allKeys():
        if "." in key and key.split(".", 1)[0] in SECTIONS:
            out[key] = store.value(key)
    return out


def base_settings(config_path: str | None = None, report: Report | None = None) -> Config:
    """The configuration without the dialog edits: what the CLI loads from ``config_path`` (None: the default file)
    and the environment. An unreadable file or a bad value there gives the defaults instead, reported through
    ``report(message)`` (and logged) when ``report`` is given (:func:`load_settings` reports it too)."""
    try:
        return load_config(config_path)
    except ConfigError as e:
        if report is not None:
            _report(report, f"configuration ignored, defaults used: {e}")
        return Config()


def load_settings(store: QSettings, config_path: str | None = None, report: Report | None = None) -> Config:
    """The app's configuration: :func:`base_settings` with the dialog edits stored in ``store`` on top, through the
    same :func:`engine.config.load_config` as the CLI. A stored value that is unknown or invalid is reported
    (``report(message)``, and logged) and skipped: that setting keeps its base value, every other edit applies."""
    edits = stored_edits(store)

    def rejected(key: str, msg: str) -> None:
        _report(report, f"stored setting {key} ignored ({msg})")

    try:
        return load_config(config_path, edits=edits, on_rejected=rejected)
    except ConfigError as e:  # the file or the environment, not an edit
        _report(report, f"configuration ignored, defaults used: {e}")
        return apply_edits(Config(), edits, rejected)


def save_settings(store: QSettings, cfg: Config, base: Config | None = None) -> None:
    """Store the values of ``cfg`` that differ from ``base`` (None: store every value); a value equal to the base
    is removed from the store, so the file and the environment decide it again."""
    for key in SETTINGS:
        v = cfg.get(key)
        if base is not None and v == base.get(key):
            store.remove(key)
        else:
            store.setValue(key, v)
    store.sync()


def _report(report: Report | None, msg: str) -> None:
    log.warning("%s", msg)
    if report is not None:
        report(msg)


# -- widgets that scrolling does not change ----------------------------------------------------------------------
class _FocusWheel:
    """Wheel events change the value only while the widget has the focus; otherwise they scroll the dialog."""

    def _init_focus(self) -> None:
        self.setFocusPolicy(Qt.StrongFocus)  # a wheel over it does not give it the focus either

    def wheelEvent(self, e):  # noqa: N802 (Qt)
        if self.hasFocus():
            super().wheelEvent(e)
        else:
            e.ignore()  # the scroll area gets it


class ChoiceBox(_FocusWheel, QComboBox):
    def __init__(self, parent=None):
        super().__init__(parent)
        self._init_focus()


class IntBox(_FocusWheel, QSpinBox):
    def __init__(self, parent=None):
        super().__init__(parent)
        self._init_focus()


class FloatBox(_FocusWheel, QDoubleSpinBox):
    def __init__(self, parent=None):
        super().__init__(parent)
        self._init_focus()


def _tooltip(s: Setting) -> str:
    extra = []
    if s.range is not None:
        extra.append(f"Range {s.range[0]:g}..{s.range[1]:g}{' ' + s.unit if s.unit else ''}.")
    extra.append(f"Default {s.default!r}; {s.key} in the TOML file, --set {s.key}=… or ${s.env}.")
    return s.help + " " + " ".join(extra)


class SettingsDialog(QDialog):
    """Edits a :class:`Config`; emits ``applied(Config)`` after a valid Apply/OK.

    Args:
        cfg: the configuration the widgets start from.
        store: where the edits persist.
        base: the configuration without the dialog edits (file + environment): Restore Defaults returns to it and
            only values that differ from it are stored. None = :func:`base_settings` of the default file.
    """

    applied = Signal(object)

    def __init__(self, cfg: Config, store: QSettings, parent=None, base: Config | None = None):
        super().__init__(parent)
        self.setWindowTitle("specvoice settings")
        self.store = store
        self.cfg = cfg
        self.base = base if base is not None else base_settings()
        self.widgets: dict[str, QWidget] = {}
        self.errors: dict[str, QLabel] = {}
        self.groups: dict[str, QGroupBox] = {}
        inner = QWidget()
        lay = QVBoxLayout(inner)
        for section in SECTIONS:
            box = QGroupBox(TITLES[section])
            box.setObjectName(section)
            form = QFormLayout(box)
            for key, s in SETTINGS.items():
                if s.section != section:
                    continue
                w = self._widget(s, cfg.get(key))
                tip = _tooltip(s)
                w.setToolTip(tip)
                w.setObjectName(key)
                err = QLabel()
                err.setObjectName(f"{key}:error")
                err.setWordWrap(True)
                err.setStyleSheet("color:#b00020")
                err.hide()
                cell = QWidget()
                cl = QVBoxLayout(cell)
                cl.setContentsMargins(0, 0, 0, 0)
                cl.setSpacing(2)
                cl.addWidget(w)
                cl.addWidget(err)
                lbl = QLabel(f"{s.label} ({s.unit})" if s.unit else s.label)
                lbl.setToolTip(tip)
                lbl.setBuddy(w)
                form.addRow(lbl, cell)
                self.widgets[key] = w
                self.errors[key] = err
                self._on_change(w, self._check)
            lay.addWidget(box)
            self.groups[section] = box
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setWidget(inner)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Apply | QDialogButtonBox.Cancel
                                   | QDialogButtonBox.RestoreDefaults)
        buttons.accepted.connect(self._ok)
        buttons.rejected.connect(self.reject)
        buttons.button(QDialogButtonBox.Apply).clicked.connect(self.apply)
        buttons.button(QDialogButtonBox.RestoreDefaults).clicked.connect(self.reset)
        self.buttons = buttons
        outer = QVBoxLayout(self)
        outer.addWidget(self.scroll)
        outer.addWidget(buttons)
        self.resize(600, 720)

    # -- widgets --------------------------------------------------------------------------------------------------
    @staticmethod
    def _widget(s: Setting, value) -> QWidget:
        if s.choices is not None:
            w = ChoiceBox()
            w.addItems([str(c) for c in s.choices])
            if s.alias is not None:  # other spellings are accepted (a language name as well as its code)
                w.setEditable(True)
            w.setCurrentText(str(value))
            return w
        if s.type is bool:
            w = QCheckBox()
            w.setChecked(value)
            return w
        if s.type is int:
            w = IntBox()
            lo, hi = s.range
            w.setRange(int(lo), int(hi))
            w.setValue(value)
            return w
        if s.type is float:
            w = FloatBox()
            lo, hi = s.range
            w.setDecimals(3)
            w.setSingleStep(10 ** round(math.log10((hi - lo) / 50)))
            w.setRange(lo, hi)
            w.setValue(value)
            return w
        return QLineEdit(str(value))

    @staticmethod
    def _on_change(w: QWidget, slot) -> None:
        if isinstance(w, QComboBox):
            w.currentTextChanged.connect(slot)
        elif isinstance(w, QCheckBox):
            w.toggled.connect(slot)
        elif isinstance(w, (QSpinBox, QDoubleSpinBox)):
            w.valueChanged.connect(slot)
        else:
            w.textChanged.connect(slot)

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
        if isinstance(w, QDoubleSpinBox):
            old = self.cfg.get(key)  # a value with more decimals than the box shows stays as it was
            return old if abs(w.value() - old) < 0.5 * 10 ** -w.decimals() else w.value()
        if isinstance(w, QSpinBox):
            return w.value()
        return w.text()

    # -- values ---------------------------------------------------------------------------------------------------
    def _parse(self) -> tuple[Config, dict[str, str]]:
        """The widgets' configuration (each refused value left as it was) and ``{key: reason}`` of the refused."""
        cfg, bad = self.cfg, {}
        for key in self.widgets:
            try:
                cfg = cfg.with_value(key, self._value(key))
            except ConfigError as e:
                bad[key] = str(e)
        for keys, msg in check_combination(cfg):
            bad.setdefault(keys[0], msg)
        return cfg, bad

    def problems(self) -> dict[str, str]:
        """``{key: reason}`` of every value the widgets hold that is refused (empty when all are valid)."""
        return self._parse()[1]

    def _check(self, *_) -> dict[str, str]:
        bad = self.problems()
        for key, err in self.errors.items():
            if key in bad:
                err.setText(bad[key])
                err.show()
                self.widgets[key].setStyleSheet("border:1px solid #b00020")
            elif not err.isHidden():
                err.hide()
                err.clear()
                self.widgets[key].setStyleSheet("")
        return bad

    def current(self) -> Config:
        """The Config in the widgets.

        Raises:
            ConfigError: a value outside its range or choices, or a broken rule between settings (the first one).
        """
        cfg, bad = self._parse()
        if bad:
            raise ConfigError(next(iter(bad.values())))
        return cfg

    def apply(self) -> bool:
        """Store and emit the widgets' configuration. A refused value is shown under its field and nothing changes.
        Returns True when applied."""
        bad = self._check()
        if bad:
            first = self.widgets[next(iter(bad))]
            self.scroll.ensureWidgetVisible(first)
            return False
        cfg = self.current()
        self.cfg = cfg
        save_settings(self.store, cfg, self.base)
        self.applied.emit(cfg)
        return True

    def _ok(self) -> None:
        if self.apply():
            self.accept()

    def reset(self) -> None:
        """Every field back to the base configuration (defaults, the file and the environment)."""
        for key in self.widgets:
            self.set_value(key, self.base.get(key))
