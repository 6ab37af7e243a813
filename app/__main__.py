"""``python -m app`` starts the desktop app (the PyInstaller entry point)."""

import sys

from app.main_window import run_app

if __name__ == "__main__":
    sys.exit(run_app())
