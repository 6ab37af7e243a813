"""The main window's metrics panel: each value's plain label and exact definition, the lines it shows for the
session's metrics events (:mod:`engine.core.events`), and the plot of the time to the spoken answer per turn."""

from __future__ import annotations

import math

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QPainter, QPen
from PySide6.QtWidgets import QWidget

from engine.core.events import SpokenAnswerMetrics, TurnMetrics

# The metrics panel: attribute → (plain label, tooltip: the exact definition, with its unit). Every value is shown
# with its unit; "–" until the session being run reports it (the panel is cleared when a session starts).
METRICS = {
    "m_rtf": ("Recognition speed",
              "Real-time factor (RTF) of speech recognition: seconds of computing per second of audio heard, "
              "e.g. 0.40× real time. Below 1× it keeps up with live speech."),
    "m_ttfs": ("First sentence ready",
               "Time to first sentence (TTFS), in seconds: from the end of your speech (the end of your utterance) "
               "to the first complete sentence of the answer's text."),
    "m_audio": ("Answer starts speaking",
                "Seconds from the end of your speech to the first sound of the spoken answer. The plot below keeps "
                "this for every turn."),
    "m_accept": ("Speculation kept",
                 "Assistant (PredGen): draft tokens kept — answer tokens the language model drafted while you were "
                 "still speaking that the final check accepted. \"Answer started before you finished\": NFETFS = 1, "
                 "i.e. one forward pass of the language model after the end of your speech (the check) was enough "
                 "for the first sentence; otherwise the number of passes (NFETFS, number of function evaluations to "
                 "the first sentence) is shown. Live captions (SSBD): draft tokens kept = accepted / drafted tokens "
                 "(A/D); from the draft = accepted / output tokens of the translation (A/O)."),
    "m_ne": ("Caption rewrites",
             "Normalized erasure (NE): words erased from the shown translation while it updated, per word of the "
             "final translation. 0 = nothing shown was ever taken back; lower flickers less."),
    "m_turn": ("End of turn",
               "How each utterance ended: the probability P(complete) that you finished your turn, judged at each "
               "pause by Smart Turn from your voice (duplex.end_of_turn = smart_turn) or by the answering LLM from "
               "your words (llm) — at or above the threshold (Settings → duplex.turn_threshold, duplex.eot_threshold) "
               "the turn ends, below it the app keeps listening; a long silence or releasing the talk button always "
               "ends it."),
    "m_barge": ("Interruptions",
                "Barge-in: times you spoke over the answer and it stopped, the audio time (s) of the latest, and "
                "what heard you (speech = the voice detector, double talk = the echo canceller's detector)."),
    "m_aec": ("Echo cancellation",
              "On when the answer plays on a loudspeaker and the input is a microphone: the answer's echo is removed "
              "from the microphone (WebRTC AEC3) so that it is not heard as your speech."),
}


class LatencyPlot(QWidget):
    """Seconds from the end of your speech to the first spoken answer, one point per answered turn, over every
    session of this window (turn number on x, seconds on y, both axes labelled; the latest 50 turns)."""

    X_LABEL = "turn"
    Y_LABEL = "seconds"
    MAX_TURNS = 50

    def __init__(self, parent=None):
        super().__init__(parent)
        self.points: list[tuple[int, float]] = []  # (turn number since the window opened, seconds)
        self.turns = 0
        self.setMinimumHeight(130)
        self.setToolTip("Each answered turn: seconds from the end of your speech to the first sound of the answer.")

    @property
    def values(self) -> list[float]:
        return [v for _, v in self.points]

    def add(self, seconds: float) -> None:
        """One more answered turn (``seconds`` ≥ 0, the time to its first audio)."""
        self.turns += 1
        self.points = (self.points + [(self.turns, float(seconds))])[-self.MAX_TURNS:]
        self.update()

    def y_top(self) -> float:
        """The y axis' top: the largest value rounded up to a whole second (at least 1 s)."""
        return float(max(1, math.ceil(max(self.values, default=0.0))))

    def paintEvent(self, e):  # noqa: N802 (Qt)
        p = QPainter(self)
        p.setRenderHint(QPainter.Antialiasing)
        fm = p.fontMetrics()
        left, bottom, top, right = fm.horizontalAdvance("00.0") + 22, fm.height() * 2 + 4, fm.height() // 2 + 2, 8
        w, h = self.width(), self.height()
        area = QRectF(left, top, max(1, w - left - right), max(1, h - top - bottom))
        fg = self.palette().color(self.foregroundRole())
        p.setPen(QPen(fg, 1))
        p.drawLine(area.bottomLeft(), area.topLeft())
        p.drawLine(area.bottomLeft(), area.bottomRight())
        y_top = self.y_top()
        for v in (0.0, y_top / 2, y_top):  # y ticks
            y = area.bottom() - v / y_top * area.height()
            p.drawLine(QPointF(area.left() - 3, y), QPointF(area.left(), y))
            p.drawText(QRectF(0, y - fm.height() / 2, area.left() - 5, fm.height()),
                       Qt.AlignRight | Qt.AlignVCenter, f"{v:g}")
        p.save()  # the y axis label, vertical
        p.translate(fm.height() * 0.8, area.center().y())
        p.rotate(-90)
        p.drawText(QRectF(-area.height() / 2, -fm.height(), area.height(), fm.height() * 1.2), Qt.AlignCenter,
                   self.Y_LABEL)
        p.restore()
        p.drawText(QRectF(area.left(), h - fm.height() - 2, area.width(), fm.height()), Qt.AlignCenter, self.X_LABEL)
        if not self.points:
            p.drawText(area, Qt.AlignCenter, "no answer yet")
            p.end()
            return
        first, last = self.points[0][0], self.points[-1][0]
        span = max(1, last - first)

        def at(turn: int, v: float) -> QPointF:
            x = area.left() + 6 + (turn - first) / span * (area.width() - 12) if last > first else area.center().x()
            return QPointF(x, area.bottom() - v / y_top * area.height())

        for turn in sorted({first, last}):  # x ticks: the first and the latest turn
            x = at(turn, 0).x()
            p.drawLine(QPointF(x, area.bottom()), QPointF(x, area.bottom() + 3))
            p.drawText(QRectF(x - 20, area.bottom() + 3, 40, fm.height()), Qt.AlignHCenter | Qt.AlignTop, str(turn))
        pts = [at(t, v) for t, v in self.points]
        p.setPen(QPen(Qt.darkCyan, 2))
        for a, b in zip(pts, pts[1:]):
            p.drawLine(a, b)
        p.setBrush(Qt.darkCyan)
        for q in pts:
            p.drawEllipse(q, 3, 3)
        p.end()


def turn_text(m: TurnMetrics, threshold: float) -> str:
    """The metrics panel's end-of-turn line for a :class:`engine.core.events.TurnMetrics`."""
    p = m.p_complete
    if not m.final:
        return f"utterance {m.utterance}: still talking (P(complete) {p:.2f} < {threshold:.2f})"
    if m.by == "silence":
        extra = f" (P(complete) {p:.2f})" if p is not None else ""
        return f"utterance {m.utterance}: ended by {m.silence_s or 0:.1f} s of silence{extra}"
    if m.by == "released":
        return f"utterance {m.utterance}: ended (talk button released)"
    return f"utterance {m.utterance}: finished (P(complete) {p:.2f} ≥ {threshold:.2f})"


def answer_speculation_text(m: SpokenAnswerMetrics) -> str:
    """The "Speculation kept" value for a :class:`engine.core.events.SpokenAnswerMetrics`."""
    if m.nfetfs is None:  # the cascade: nothing was drafted while the user spoke
        return "none (the answer started after you finished)"
    kept = f"{m.accepted_tokens} draft tokens kept"
    if m.nfetfs == 1:
        return f"{kept}; answer started before you finished"
    return f"{kept}; {m.nfetfs} model passes after you finished"
