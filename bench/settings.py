"""Benchmark options whose default is a product setting: the value comes from :class:`engine.config.Config`, so a
default is declared once (engine/config.py) and a benchmark measures what the product runs unless told otherwise."""

from __future__ import annotations

from typing import Any, Mapping


def default_of(key: str) -> Any:
    """The product's default of setting ``key`` ("section.name"), for a benchmark without ``--config``/``--set``:
    :class:`engine.config.Config` as declared, no config file or environment applied. Raises ConfigError for an
    unknown key."""
    from engine.config import Config

    return Config().get(key)


def fill_from_config(args: Any, cfg: Any, options: Mapping[str, str]) -> None:
    """For a benchmark with ``--config``/``--set``: each attribute of ``args`` named in ``options`` that was left
    unset (None) takes the value of its setting (``options[attribute]``, "section.name") in ``cfg``, the
    configuration the benchmark loaded. Changes ``args`` in place. Raises ConfigError for an unknown key."""
    for attr, key in options.items():
        if getattr(args, attr) is None:
            setattr(args, attr, cfg.get(key))
