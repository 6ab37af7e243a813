"""Live-caption window: source line and translation line, display-only mask-k, no flicker.

The stable prefix is drawn solid; the masked tail (the last k tokens SSBD keeps in its draft, or the ASR's
uncommitted words) is hidden or drawn faded (a setting). A line is only repainted when its text changes. Until the
first caption arrives the window says how to start one. Only the caption panel takes the dark/light colours; the
controls below it keep the desktop's own, so that they stay readable in either.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QFrame, QHBoxLayout, QLabel, QSlider, QVBoxLayout, QWidget

PLACEHOLDER = ("Live captions appear here. In the main window choose Mode → Live caption and a language, pick an "
               "input, then press Start hands-free (or hold to talk).")


class CaptionWindow(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent, Qt.Window)
        self.setWindowTitle("specvoice — live captions")
        self.panel = QFrame()  # the captions, in the dark/light colours
        self.panel.setObjectName("captions")
        self.source = QLabel()
        self.translation = QLabel()
        for lbl in (self.source, self.translation):
            lbl.setWordWrap(True)
            lbl.setTextFormat(Qt.RichText)
            lbl.setAlignment(Qt.AlignLeft | Qt.AlignBottom)
        self.placeholder = QLabel(PLACEHOLDER)  # shown until the first caption
        self.placeholder.setObjectName("placeholder")
        self.placeholder.setWordWrap(True)
        self.placeholder.setAlignment(Qt.AlignCenter)
        self.on_top = QCheckBox("Stay on top")
        self.dark = QCheckBox("Dark")
        self.dark.setChecked(True)
        self.fade = QCheckBox("Show masked tail faded")
        self.size = QSlider(Qt.Horizontal)
        self.size.setRange(14, 72)
        self.size.setValue(32)
        self.on_top.toggled.connect(self._set_on_top)
        self.dark.toggled.connect(self._style)
        self.size.valueChanged.connect(self._style)
        self.fade.toggled.connect(self._rerender)
        self.size.setToolTip("Font size of the translation (the source line is 0.6 of it), in points")
        self.fade.setToolTip("Show the words still being revised (the masked tail) in grey instead of hiding them")
        self.on_top.setToolTip("Keep this window above the others")
        self.controls = QWidget()  # the desktop's own colours: readable on either caption theme
        self.controls.setObjectName("controls")
        bar = QHBoxLayout(self.controls)
        bar.setContentsMargins(8, 4, 8, 4)
        for w in (self.on_top, self.dark, self.fade, QLabel("Size"), self.size):
            bar.addWidget(w)
        panel = QVBoxLayout(self.panel)
        panel.addWidget(self.placeholder, 1)
        panel.addWidget(self.source, 1)
        panel.addWidget(self.translation, 2)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        lay.addWidget(self.panel, 1)
        lay.addWidget(self.controls)
        self._last: dict[str, tuple[str, str]] = {}
        self.repaints = 0
        self.resize(900, 320)
        self._style()

    def _set_on_top(self, on: bool) -> None:
        self.setWindowFlag(Qt.WindowStaysOnTopHint, on)
        self.show()

    def _style(self) -> None:
        fg, bg = ("#f5f5f5", "#101418") if self.dark.isChecked() else ("#101418", "#fafafa")
        hint = "#9aa4ae" if self.dark.isChecked() else "#5a6570"  # the placeholder: readable, but not a caption
        self.panel.setStyleSheet(f"QFrame#captions {{ background:{bg}; }} QFrame#captions QLabel {{ color:{fg}; "
                                 f"background:transparent; }} QLabel#placeholder {{ color:{hint}; }}")
        f = self.translation.font()
        f.setPointSize(self.size.value())
        self.translation.setFont(f)
        f2 = self.source.font()
        f2.setPointSize(max(10, int(self.size.value() * 0.6)))
        self.source.setFont(f2)
        f3 = self.placeholder.font()
        f3.setPointSize(max(12, int(self.size.value() * 0.5)))
        self.placeholder.setFont(f3)
        self._rerender()

    def _html(self, stable: str, tail: str) -> str:
        s = html.escape(stable)
        if tail.strip() and self.fade.isChecked():
            s += f'<span style="color:gray">{html.escape(tail)}</span>'
        return s

    def _set(self, which: str, label: QLabel, stable: str, tail: str) -> None:
        if self._last.get(which) == (stable, tail):
            return  # nothing changed: no repaint, no flicker
        self._last[which] = (stable, tail)
        label.setText(self._html(stable, tail))
        self.placeholder.hide()
        self.repaints += 1

    def _rerender(self) -> None:
        last = dict(self._last)
        self._last.clear()
        if "source" in last:
            self._set("source", self.source, *last["source"])
        if "translation" in last:
            self._set("translation", self.translation, *last["translation"])

    def show_caption(self, cap) -> None:
        """Render an :class:`engine.core.events.Caption`."""
        self._set("source", self.source, cap.source_stable or ("" if not cap.final else cap.source),
                  cap.source_tail if not cap.final else "")
        self._set("translation", self.translation, cap.translation_stable, "" if cap.final else cap.translation_tail)

    def visible_translation(self) -> str:
        """The translation text a viewer sees (tail hidden unless faded)."""
        stable, tail = self._last.get("translation", ("", ""))
        return stable + (tail if self.fade.isChecked() else "")
