"""CTranslate2 Whisper: its decoder behind the verification protocol (:class:`CT2WhisperDecoder`), and its
``model.bin`` read back into a transformers ``WhisperForConditionalGeneration`` (:func:`load_whisper_torch`).

The speculative decoders need what CTranslate2 does not expose: decoder logits at every position of a token
batch, a KV cache that can be cropped, and custom attention masks (token trees). The same fp16 weights are
therefore loaded into torch.

Format (``ctranslate2/specs/model_spec.py::_serialize``): uint32 binary version, string spec name, uint32
revision, uint32 variable count, then per variable: string name, uint8 rank, uint32 dims, uint8 dtype id
(float32, int8, int16, int32, float16, bfloat16), uint32 byte count, raw bytes; then uint32 alias count and
(alias, target) string pairs. Strings are uint16 length (incl. NUL) + UTF-8 + NUL.

Variable names follow ``ctranslate2/specs/whisper_spec.py`` (the inverse of
``ctranslate2/converters/transformers.py::WhisperLoader``).

Raises:
    ValueError: the file is not a CTranslate2 Whisper model or a variable is missing.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Sequence

import numpy as np

_DTYPES = (np.float32, np.int8, np.int16, np.int32, np.float16, None)  # bfloat16 handled separately


def read_ct2_variables(path: str | Path) -> tuple[str, dict[str, np.ndarray]]:
    """Parse a CTranslate2 ``model.bin``.

    Returns:
        (spec name, {variable name: array}); aliases are resolved to the same array.

    Raises:
        ValueError: truncated or unknown format.
    """
    data = memoryview(Path(path).read_bytes())
    pos = 0

    def u(fmt: str):
        nonlocal pos
        vals = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return vals[0]

    def s() -> str:
        nonlocal pos
        n = u("H")
        out = bytes(data[pos : pos + n - 1]).decode("utf-8")
        pos += n
        return out

    try:
        version = u("I")
        if version < 3 or version > 10:
            raise ValueError(f"unsupported CTranslate2 binary version {version}")
        name = s()
        u("I")  # revision
        n = u("I")
        variables: dict[str, np.ndarray] = {}
        for _ in range(n):
            vname = s()
            rank = u("B")
            shape = tuple(u("I") for _ in range(rank))
            dtype_id = u("B")
            nbytes = u("I")
            raw = data[pos : pos + nbytes]
            pos += nbytes
            if dtype_id == 5:  # bfloat16 -> float32
                a = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
                arr = a.view(np.float32)
            else:
                arr = np.frombuffer(raw, dtype=_DTYPES[dtype_id])
            variables[vname.replace("/", ".")] = arr.reshape(shape)
        if pos < len(data):
            for _ in range(u("I")):
                alias, target = s(), s()
                variables[alias.replace("/", ".")] = variables[target.replace("/", ".")]
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a readable CTranslate2 model ({e})") from None
    return name, variables


def _t(a: np.ndarray):
    import torch

    return torch.from_numpy(np.array(a, dtype=np.float32))


def load_whisper_torch(model_dir: str | Path, dtype=None):
    """Build a ``transformers.WhisperForConditionalGeneration`` from a CTranslate2 Whisper directory.

    Args:
        model_dir: directory holding ``model.bin`` and ``config.json`` (CTranslate2 layout).
        dtype: torch dtype of the returned model (default float32; the stored weights are float16).

    Returns:
        The model in eval mode. ``model.generation_config`` is filled with the Whisper special-token ids from the
        CTranslate2 config (suppress_ids, lang_ids, ...).

    Raises:
        ValueError: not a Whisper CTranslate2 model, int8-quantised weights, or missing variables.
    """
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    model_dir = Path(model_dir)
    name, v = read_ct2_variables(model_dir / "model.bin")
    if "Whisper" not in name:
        raise ValueError(f"{model_dir}: spec {name!r} is not a Whisper model")
    if any(k.endswith("weight_scale") for k in v):
        raise ValueError(f"{model_dir}: int8-quantised CTranslate2 weights cannot be read into torch")
    ct2_cfg = json.loads((model_dir / "config.json").read_text()) if (model_dir / "config.json").exists() else {}

    def n_layers(prefix: str) -> int:
        i = 0
        while f"{prefix}.layer_{i}.self_attention.linear_0.weight" in v:
            i += 1
        return i

    d_model = v["encoder.conv1.weight"].shape[0]
    n_mels = v["encoder.conv1.weight"].shape[1]
    vocab = v["decoder.embeddings.weight"].shape[0]
    enc_layers, dec_layers = n_layers("encoder"), n_layers("decoder")
    ffn = v["encoder.layer_0.ffn.linear_0.weight"].shape[0]
    heads = int(v["encoder.num_heads"]) if "encoder.num_heads" in v else max(1, d_model // 64)
    multilingual = vocab >= 51865
    config = WhisperConfig(
        vocab_size=vocab,
        num_mel_bins=n_mels,
        d_model=d_model,
        encoder_layers=enc_layers,
        decoder_layers=dec_layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn,
        max_source_positions=v["encoder.position_encodings.encodings"].shape[0],
        max_target_positions=v["decoder.position_encodings.encodings"].shape[0],
        decoder_start_token_id=50258 if multilingual else 50257,
        eos_token_id=50257 if multilingual else 50256,
        pad_token_id=50257 if multilingual else 50256,
        bos_token_id=50257 if multilingual else 50256,
        tie_word_embeddings=True,
    )
    with torch.device("meta"):
        model = WhisperForConditionalGeneration(config)
    sd: dict[str, torch.Tensor] = {}

    def attn(dst: str, src: str, fused_qkv: bool, cross: bool = False) -> None:
        if cross:
            q_w, q_b = v[f"{src}.linear_0.weight"], v[f"{src}.linear_0.bias"]
            kv_w, kv_b = v[f"{src}.linear_1.weight"], v[f"{src}.linear_1.bias"]
            k_w, vv_w = np.split(kv_w, 2)
            _, vv_b = np.split(kv_b, 2)
            sd[f"{dst}.q_proj.weight"], sd[f"{dst}.q_proj.bias"] = _t(q_w), _t(q_b)
            sd[f"{dst}.k_proj.weight"] = _t(k_w)
            sd[f"{dst}.v_proj.weight"], sd[f"{dst}.v_proj.bias"] = _t(vv_w), _t(vv_b)
            o = 2
        else:
            w, b = v[f"{src}.linear_0.weight"], v[f"{src}.linear_0.bias"]
            q_w, k_w, vv_w = np.split(w, 3)
            q_b, _, vv_b = np.split(b, 3)
            sd[f"{dst}.q_proj.weight"], sd[f"{dst}.q_proj.bias"] = _t(q_w), _t(q_b)
            sd[f"{dst}.k_proj.weight"] = _t(k_w)
            sd[f"{dst}.v_proj.weight"], sd[f"{dst}.v_proj.bias"] = _t(vv_w), _t(vv_b)
            o = 1
        sd[f"{dst}.out_proj.weight"] = _t(v[f"{src}.linear_{o}.weight"])
        sd[f"{dst}.out_proj.bias"] = _t(v[f"{src}.linear_{o}.bias"])

    def ln(dst: str, src: str) -> None:
        sd[f"{dst}.weight"] = _t(v[f"{src}.gamma"])
        sd[f"{dst}.bias"] = _t(v[f"{src}.beta"])

    def ffn_(dst: str, src: str) -> None:
        ln(f"{dst}.final_layer_norm", f"{src}.layer_norm")
        sd[f"{dst}.fc1.weight"] = _t(v[f"{src}.linear_0.weight"])
        sd[f"{dst}.fc1.bias"] = _t(v[f"{src}.linear_0.bias"])
        sd[f"{dst}.fc2.weight"] = _t(v[f"{src}.linear_1.weight"])
        sd[f"{dst}.fc2.bias"] = _t(v[f"{src}.linear_1.bias"])

    e = "model.encoder"
    for i in (1, 2):
        sd[f"{e}.conv{i}.weight"] = _t(v[f"encoder.conv{i}.weight"])
        sd[f"{e}.conv{i}.bias"] = _t(v[f"encoder.conv{i}.bias"])
    sd[f"{e}.embed_positions.weight"] = _t(v["encoder.position_encodings.encodings"])
    for i in range(enc_layers):
        src, dst = f"encoder.layer_{i}", f"{e}.layers.{i}"
        attn(f"{dst}.self_attn", f"{src}.self_attention", True)
        ln(f"{dst}.self_attn_layer_norm", f"{src}.self_attention.layer_norm")
        ffn_(dst, f"{src}.ffn")
    ln(f"{e}.layer_norm", "encoder.layer_norm")

    d = "model.decoder"
    sd[f"{d}.embed_tokens.weight"] = _t(v["decoder.embeddings.weight"])
    sd[f"{d}.embed_positions.weight"] = _t(v["decoder.position_encodings.encodings"])
    for i in range(dec_layers):
        src, dst = f"decoder.layer_{i}", f"{d}.layers.{i}"
        attn(f"{dst}.self_attn", f"{src}.self_attention", True)
        ln(f"{dst}.self_attn_layer_norm", f"{src}.self_attention.layer_norm")
        attn(f"{dst}.encoder_attn", f"{src}.attention", False, cross=True)
        ln(f"{dst}.encoder_attn_layer_norm", f"{src}.attention.layer_norm")
        ffn_(dst, f"{src}.ffn")
    ln(f"{d}.layer_norm", "decoder.layer_norm")
    sd["proj_out.weight"] = sd[f"{d}.embed_tokens.weight"]

    missing, unexpected = model.load_state_dict(sd, strict=False, assign=True)
    model.tie_weights()
    missing = [m for m in missing if not m.endswith("k_proj.bias")]
    if missing or unexpected:
        raise ValueError(f"{model_dir}: weights do not fit WhisperConfig (missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]})")
    model.eval()
    if dtype is not None:
        model = model.to(dtype)
    gc = model.generation_config
    gc.suppress_tokens = list(ct2_cfg.get("suppress_ids", []))
    gc.begin_suppress_tokens = list(ct2_cfg.get("suppress_ids_begin", []))
    gc.lang_ids = list(ct2_cfg.get("lang_ids", []))
    gc.alignment_heads = ct2_cfg.get("alignment_heads")
    gc.is_multilingual = multilingual
    return model


class CT2WhisperDecoder:
    """:class:`engine.llm.protocol.TokenScorer` over CTranslate2's Whisper decoder for one encoder output.

    CTranslate2 keeps no KV cache between calls and exposes no per-position logits, so verification is
    ``Whisper.align`` — ONE batched decoder pass that returns p(token | prefix) for every given token together with
    the cross-attention alignment (kept in :attr:`alignment` for word timestamps) — and continuation is one
    ``Whisper.generate`` call from the verified prefix (which re-reads the prefix in one batched pass).

    Args:
        model: ``ctranslate2.models.Whisper`` (``faster_whisper.WhisperModel.model``).
        features: its encoder output, StorageView (1, n_frames / 2, d_model).
        num_frames: mel frames (10 ms) that hold audio (samples // 160), for the alignment.
    """

    def __init__(self, model, features, num_frames: int):
        self.model, self.features, self.num_frames = model, features, int(num_frames)
        self.n_forward = 0
        self.alignment = None

    def token_probs(self, context: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        """p(tokens[i] | context, tokens[<i]), float64 (len(tokens),), in one pass; ``context`` is the whole decoder
        prompt (previous text, SOT sequence, <|notimestamps|>)."""
        self.alignment = self.model.align(self.features, list(context), [list(tokens)], self.num_frames)[0]
        self.n_forward += 1
        return np.asarray(self.alignment.text_token_probs, np.float64)

    def generate(self, prefix: Sequence[int], **options):
        """``Whisper.generate`` from ``prefix`` (prompt ⊕ accepted tokens); ``options`` are its keyword arguments.
        Returns its WhisperGenerationResult (``sequences_ids`` include the forced prefix's text tokens)."""
        return self.model.generate(self.features, [list(prefix)], **options)[0]


def detect_language(model, features) -> list[tuple[str, float]]:
    """Whisper's language identification on an encoder output that a decode already computed: the probabilities of
    the language tokens after ``<|startoftranscript|>`` (CTranslate2 ``Whisper.detect_language``: one decoder step).

    Args:
        model: ``ctranslate2.models.Whisper`` (multilingual).
        features: its encoder output, StorageView (1, n_frames / 2, d_model); a window scaled to its audio or the
            padded 30 s window Whisper was trained on.

    Returns:
        (ISO 639-1 code, probability) pairs, most probable first, for the first item of the batch.

    Raises:
        RuntimeError: the model is English-only (CTranslate2's error).
    """
    return [(tok.strip("<|>"), float(p)) for tok, p in model.detect_language(features)[0]]
