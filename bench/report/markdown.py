"""Markdown for the generated docs: number formatting (units, signs, the typographic minus), tables, prose
re-wrapping, heading anchors and the lines that cite a result file with the command that regenerates it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable

from bench.report.results import job_for


MINUS = "\u2212"  # typographic minus for negative numbers


def num(x: float | None, d: int = 2) -> str:
    """``x`` with ``d`` decimals (a typographic minus when negative); "—" for None."""
    if x is None:
        return "—"
    s = f"{x:.{d}f}"
    if s.startswith("-"):
        s = MINUS + s[1:]
        if s.strip(MINUS + "0.") == "":
            s = s[1:]  # "−0.00" → "0.00"
    return s


def signed(x: float | None, d: int = 3) -> str:
    """``x`` with an explicit sign: "+0.020", "−0.013"."""
    if x is None:
        return "—"
    s = num(x, d)
    return s if s.startswith(MINUS) else "+" + s


def sec(x: float | None, d: int = 2) -> str:
    return "—" if x is None else f"{num(x, d)} s"


def pct(x: float | None, d: int = 0) -> str:
    """A share (0..1) as a percentage."""
    return "—" if x is None else f"{num(100 * x, d)} %"


def times(x: float | None, d: int = 2) -> str:
    return "—" if x is None else f"{num(x, d)}×"


def count(share: float | None, n: int) -> str:
    """A share of ``n`` items as "k/n"."""
    return "—" if share is None else f"{round(share * n)}/{n}"


def trio(d: dict, stem: str, unit: str = " s", d_: int = 2, keys=("p50", "p90", "mean")) -> str:
    """"a / b / c s" from ``d[stem + '_' + key]`` for each key."""
    return " / ".join(num(d[f"{stem}_{k}"], d_) for k in keys) + unit


def bold(s: str, on: bool = True) -> str:
    return f"**{s}**" if on else s


def table(head: Iterable[str], rows: Iterable[Iterable[Any]], keep_empty: bool = False) -> str:
    """A Markdown table. Columns that are "—" in every row are left out unless ``keep_empty``."""
    head = list(head)
    rows = [[str(c) for c in r] for r in rows]
    for r in rows:
        assert len(r) == len(head), (head, r)
    cols = [i for i in range(len(head))
            if keep_empty or i == 0 or any(r[i] not in ("—", "") for r in rows)]
    lines = ["| " + " | ".join(head[i] for i in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(r[i] for i in cols) + " |" for r in rows]
    return "\n".join(lines)


def reflow(md: str, width: int = 118) -> str:
    """Re-wrap prose paragraphs and bullet items of ``md`` to ``width`` columns; tables, headings, comments and the
    lists of result files (one long command per line) stay as they are."""
    import textwrap

    out = []
    for block in md.split("\n\n"):
        first = block.lstrip("\n")
        if first.startswith(("|", "#", "<!--", "* `bench/results/", "* [", "```")):
            out.append(block)
            continue
        items: list[list[str]] = []
        for line in block.split("\n"):
            if line.startswith("* ") or not items:
                items.append([line])
            else:
                items[-1].append(line)
        wrapped = []
        for item in items:
            text = " ".join(x.strip() for x in item)
            bullet = item[0].startswith("* ")
            wrapped.append(textwrap.fill(text, width, break_long_words=False, break_on_hyphens=False,
                                         subsequent_indent="  " if bullet else ""))
        out.append("\n".join(wrapped))
    return "\n\n".join(out)


def span(values: Iterable[float], d: int = 2, unit: str = "") -> str:
    """"lo–hi" of the values (one value when they agree at this precision)."""
    v = sorted(values)
    lo, hi = num(v[0], d), num(v[-1], d)
    return f"{lo}{unit}" if lo == hi else f"{lo}–{hi}{unit}"


def produced_by(*outputs: str) -> str:
    """Markdown lines naming each file and the command that regenerates it."""
    lines = []
    for out in outputs:
        j = job_for(out)
        lines.append(f"* `bench/results/{out}` — `specvoice bench all --only {j.name}`, i.e. "
                     f"`{j.command('bench/results')}`")
    return "\n".join(lines)


def key_number(d: dict, prefix: str) -> str:
    """The number in the first key of ``d`` that starts with ``prefix`` ("threads_2" → "2")."""
    return next(k[len(prefix):] for k in d if k.startswith(prefix))


def stem(path: str) -> str:
    return Path(path).name.rsplit(".", 1)[0]


def heading(block: str) -> str:
    return block.splitlines()[0][3:].strip()


def anchor(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation removed, spaces to hyphens."""
    a = title.lower()
    a = re.sub(r"[^\w\- ]", "", a)
    return a.replace(" ", "-")
