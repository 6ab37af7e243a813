"""``python -m app`` (and the PyInstaller bundle's ``specvoice`` binary): with no argument the desktop app, with any
argument the CLI (``python -m app --help`` prints the CLI's help; ``python -m app app`` is the desktop app through
the CLI, which reads ``--config`` and the environment), so the bundle runs both."""

import sys

if __name__ == "__main__":
    if len(sys.argv) > 1:
        from app.cli import main

        sys.exit(main(sys.argv[1:]))
    from app.main_window import run_app

    sys.exit(run_app())
