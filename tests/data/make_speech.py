"""Regenerate the synthetic test recordings of this folder (espeak-ng 1.51, 16 kHz mono FLAC).

    python tests/data/make_speech.py      # needs the espeak-ng program (apt-get install espeak-ng)

* ``lang_en_fr_okay_de.flac``: an English, a French sentence, a short English "Okay.", a German sentence, with
  1.2 s pauses (language identification under ``asr.language = "auto"``: the French and German utterances are
  long enough to switch the language, the "Okay." is not).
* ``hesitation_en.flac``: one English sentence with a 0.8 s hesitation pause after "to" (the VAD ends an utterance
  after 0.6 s of silence, so it is cut in two; the second pass decodes the halves together).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

SR = 16000
SPEECH = {
    "en": ("en-us", "Good morning, I would like to book a table for two people tonight."),
    "fr": ("fr", "Bonjour, je voudrais réserver une table pour deux personnes ce soir, près de la fenêtre s'il vous "
                 "plaît."),
    "okay": ("en-us", "Okay."),
    "de": ("de", "Guten Morgen, ich möchte gerne wissen, wann der nächste Zug nach Berlin abfährt."),
    "h1": ("en-us", "I think we should move the meeting to"),
    "h2": ("en-us", "next Thursday afternoon, because the design team is still busy."),
}


def espeak(voice: str, text: str) -> np.ndarray:
    from audio.io import resample

    with tempfile.NamedTemporaryFile(suffix=".wav") as f:
        subprocess.run(["espeak-ng", "-v", voice, "-s", "150", "-w", f.name, text], check=True)
        a, sr = sf.read(f.name, dtype="float32")
    a = resample(a, sr, SR)
    return (0.6 * a / max(1e-6, float(np.abs(a).max()))).astype(np.float32)


def silence(s: float) -> np.ndarray:
    return np.zeros(int(round(s * SR)), np.float32)


def main() -> None:
    sp = {k: espeak(*v) for k, v in SPEECH.items()}
    mix = [silence(0.4), sp["en"], silence(1.2), sp["fr"], silence(1.2), sp["okay"], silence(1.2), sp["de"],
           silence(0.6)]
    sf.write(HERE / "lang_en_fr_okay_de.flac", np.concatenate(mix), SR)
    hes = [silence(0.4), sp["h1"], silence(0.8), sp["h2"], silence(0.6)]
    sf.write(HERE / "hesitation_en.flac", np.concatenate(hes), SR)


if __name__ == "__main__":
    main()
