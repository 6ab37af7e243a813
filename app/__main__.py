"""``python -m app`` (and the PyInstaller bundle's ``specvoice`` binary): the desktop app, or — with a command
such as ``transcribe FILE`` — the CLI, so the bundle runs both."""

import sys

if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        from app.cli import main

        sys.exit(main(sys.argv[1:]))
    from app.main_window import run_app

    sys.exit(run_app())
