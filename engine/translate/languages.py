"""Languages: the caption targets and the spoken languages, codes and names, and a cheap language check by stop
words and letters.

``LANGUAGES`` maps the caption target languages' ISO 639-1 codes to English names, ``WHISPER_NAMES`` those of
the languages Whisper transcribes; :func:`caption_targets` and :func:`whisper_languages` list them as ``(code, name)``
(the settings' choices, the desktop app's language boxes). :func:`language_code` / :func:`language_name` convert a
caption language either way (``None`` / the input back when unknown). :func:`language_scores` counts, per language of
``SUPPORTED`` and English, the stop words and language-specific letters in a text (the fidelity guard's
target-language check, :mod:`engine.translate.fidelity`).
"""

from __future__ import annotations

import re

LANGUAGES = {"de": "German", "fr": "French", "es": "Spanish", "it": "Italian", "pt": "Portuguese", "nl": "Dutch",
             "zh": "Chinese", "ja": "Japanese", "ru": "Russian", "en": "English", "pl": "Polish", "tr": "Turkish"}


CODES = {v.lower(): k for k, v in LANGUAGES.items()}

#: the languages the multilingual Whisper models transcribe, code → English name, in their tokenizer's order (most
#: training data first); ``yue`` is a large-v3 token only and is left out, since the shipped base model has no such
#: token
WHISPER_NAMES = {
    "en": "English", "zh": "Chinese", "de": "German", "es": "Spanish", "ru": "Russian", "ko": "Korean",
    "fr": "French", "ja": "Japanese", "pt": "Portuguese", "tr": "Turkish", "pl": "Polish", "ca": "Catalan",
    "nl": "Dutch", "ar": "Arabic", "sv": "Swedish", "it": "Italian", "id": "Indonesian", "hi": "Hindi",
    "fi": "Finnish", "vi": "Vietnamese", "he": "Hebrew", "uk": "Ukrainian", "el": "Greek", "ms": "Malay",
    "cs": "Czech", "ro": "Romanian", "da": "Danish", "hu": "Hungarian", "ta": "Tamil", "no": "Norwegian",
    "th": "Thai", "ur": "Urdu", "hr": "Croatian", "bg": "Bulgarian", "lt": "Lithuanian", "la": "Latin", "mi": "Maori",
    "ml": "Malayalam", "cy": "Welsh", "sk": "Slovak", "te": "Telugu", "fa": "Persian", "lv": "Latvian",
    "bn": "Bengali", "sr": "Serbian", "az": "Azerbaijani", "sl": "Slovenian", "kn": "Kannada", "et": "Estonian",
    "mk": "Macedonian", "br": "Breton", "eu": "Basque", "is": "Icelandic", "hy": "Armenian", "ne": "Nepali",
    "mn": "Mongolian", "bs": "Bosnian", "kk": "Kazakh", "sq": "Albanian", "sw": "Swahili", "gl": "Galician",
    "mr": "Marathi", "pa": "Punjabi", "si": "Sinhala", "km": "Khmer", "sn": "Shona", "yo": "Yoruba", "so": "Somali",
    "af": "Afrikaans", "oc": "Occitan", "ka": "Georgian", "be": "Belarusian", "tg": "Tajik", "sd": "Sindhi",
    "gu": "Gujarati", "am": "Amharic", "yi": "Yiddish", "lo": "Lao", "uz": "Uzbek", "fo": "Faroese",
    "ht": "Haitian Creole", "ps": "Pashto", "tk": "Turkmen", "nn": "Nynorsk", "mt": "Maltese", "sa": "Sanskrit",
    "lb": "Luxembourgish", "my": "Myanmar", "bo": "Tibetan", "tl": "Tagalog", "mg": "Malagasy", "as": "Assamese",
    "tt": "Tatar", "haw": "Hawaiian", "ln": "Lingala", "ha": "Hausa", "ba": "Bashkir", "jw": "Javanese",
    "su": "Sundanese",
}


#: target languages the guard's language check covers (and English)
SUPPORTED = ("de", "fr", "es")


def caption_targets() -> list[tuple[str, str]]:
    """``(code, English name)`` of every language captions translate into (``caption.target_language``'s
    choices), in the settings' order: ``[("de", "German"), ("fr", "French"), ...]``."""
    return list(LANGUAGES.items())


def whisper_languages() -> list[tuple[str, str]]:
    """``(code, English name)`` of every language the speaker may speak (``asr.language``'s choices besides
    "auto", and ``asr.languages``'s), in Whisper's tokenizer order: ``[("en", "English"), ("zh", "Chinese"), ...]``.
    """
    return list(WHISPER_NAMES.items())


def language_name(code_or_name: str) -> str:
    return LANGUAGES.get(code_or_name.lower(), code_or_name)


def language_code(code_or_name: str) -> str | None:
    """ISO 639-1 code of a code or English language name ("German" → "de"); None if unknown."""
    s = code_or_name.strip().lower()
    return s if s in LANGUAGES else CODES.get(s)


# -- fidelity guard ---------------------------------------------------------------------------------------------
STOPWORDS = {
    "en": set("the a an and or of to in on at is are was were be been it its this that these those you your i me my "
              "we our he she they them what how why when where who which can could would will should shall with "
              "for not do does did have has had there about from please tell".split()),
    "de": set("der die das den dem des und oder ist sind war ein eine einen einem einer nicht ich du sie wir ihr "
              "es mit für zu zum zur von vom auf im am was wie warum wann wo wer welche kannst können könnten "
              "bitte mir mich dir dich uns sein seine auch über nach bei aus ist's gibt eines schreibe hat haben habe "
              "hast wird werden noch schon sehr dass wenn aber nur kein keine mein meine dein deine diese dieser "
              "dieses jetzt heute zwei drei".split()),
    "fr": set("le la les un une et ou est sont était de du des ne pas je tu vous nous il elle ils elles ce cette "
              "ces que qui quoi comment pourquoi quand où pour avec dans sur au aux mon ma mes votre vos ton ta "
              "peux pouvez s'il plaît une d'un l'".split()),
    "es": set("el la los las un una unos unas y o es son era de del no yo tú usted nosotros ellos que qué cómo "
              "por para con en al mi mis su sus tu puedes puede favor cuál cuándo dónde quién este esta estos "
              "escribe dime".split()),
}


LETTERS = {"de": "äöüß", "fr": "éèêàçùœâîôë", "es": "ñ¿¡áíóú"}


_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?", re.UNICODE)


def language_scores(text: str) -> dict[str, int]:
    """Evidence per language (en, de, fr, es): stop words found + letters specific to the language."""
    low = text.lower()
    toks = _WORD.findall(low)
    sc = {lang: sum(t in sw for t in toks) for lang, sw in STOPWORDS.items()}
    for lang, chars in LETTERS.items():
        sc[lang] += sum(low.count(c) for c in chars)
    return sc
