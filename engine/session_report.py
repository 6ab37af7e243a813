"""A session's report: what :class:`engine.session.Session` did, as the JSON the ``specvoice`` commands write.

Times are seconds (rounded to ms); walls are ``time.monotonic()`` seconds, so every latency is a difference of two
walls measured in the same process. "eos" is the VAD's end of speech of the utterance.
"""

from __future__ import annotations

import numpy as np

from engine.config import Config


def _r(x, nd: int = 3):
    return None if x is None else round(float(x), nd)


def asr_method_label(cfg: Config) -> str:
    """The ASR method a report names: ``asr.method``, or ``"auto → ar"`` where "auto" chose (engine.devices)."""
    from engine.devices import asr_method, method_label

    return method_label(cfg.asr.method, asr_method(cfg))


def asr_report(result, cfg: Config) -> dict:
    """The session's streaming ASR (``result``: :class:`engine.session.SessionResult`): per utterance its text,
    revised text, span, updates, compute and end of speech → final latency; overall RTF and the second pass."""
    st = result.transcriber
    s = st.stats
    utts = []
    for u in s.utterances:
        utts.append({
            "text": u.text, "language": u.language, "revised_text": u.revised_text,
            "t_start": _r(u.t_start), "t_end": _r(u.t_end), "updates": u.updates, "asr_compute_s": _r(u.asr_compute_s),
            "eos_to_final_s": _r(u.final_wall - u.eos_wall) if u.final_wall and u.eos_wall else None,
            "vad_decision_s": _r(u.vad_end_wall - u.eos_wall) if u.vad_end_wall and u.eos_wall else None,
        })
    lat = [u["eos_to_final_s"] for u in utts if u["eos_to_final_s"] is not None]
    return {
        "method": asr_method_label(cfg), "model_role": cfg.asr.model_role, "audio_s": _r(s.audio_s),
        "compute_s": _r(s.asr_compute_s), "rtf": _r(s.rtf, 4), "updates": s.updates,
        "eos_to_final_s_mean": _r(np.mean(lat)) if lat else None, "utterances": utts,
        "text": " ".join(u.text for u in s.utterances if u.text),
        # the second pass (asr.revise_max_s): each utterance's latest text, and its share of compute_s
        "revised_text": " ".join(t for t in st.texts.values() if t), "revisions": s.revisions,
        "revise_compute_s": _r(s.revise_compute_s),
    }


def answers_report(result, cfg: Config) -> dict:
    """The assist session's answers (``result``: :class:`engine.session.SessionResult`): per answered turn the
    latencies from the end of speech (final transcript, first token, first sentence = TTFS, first audio), NFETFS,
    PredGen's updates, the LLM's and the TTS's speed."""
    eos = {u.index: u.eos_wall for u in result.transcriber.stats.utterances}
    finals = result.finals
    out = []
    for rec in result.answers:
        m, utt = rec["metrics"], rec["utterance"]
        e = eos.get(utt)
        first_audio = result.first_sample_wall if result.played and result.first_sample_wall else m.first_audio_wall
        out.append({
            "user": rec["user"], "answer": rec.get("answer", ""),
            "eos_to_final_transcript_s": _r(finals[utt] - e) if e and utt in finals else None,
            "eos_to_first_token_s": _r(m.first_token_wall - e) if e and m.first_token_wall else None,
            "ttfs_s": _r(m.first_sentence_wall - e) if e and m.first_sentence_wall else None,
            "eos_to_first_audio_s": _r(first_audio - e) if e and first_audio else None,
            "final_transcript_to_first_audio_s": _r(first_audio - finals[utt]) if first_audio and utt in finals
            else None,
            "nfetfs": m.nfetfs, "presynth_used": m.presynth_used, "speculative_updates": m.speculative_updates,
            "accepted_tokens": m.accepted_tokens,
            "updates": [{"partial": s.partial, "accepted": s.accepted, "previous_len": s.previous_len,
                         "generated": s.generated, "nfe": s.nfe, "compute_s": _r(s.compute_s),
                         "first_sentence": s.first_sentence, "cancelled": s.cancelled} for s in m.steps],
            "llm": {"prompt_tokens": m.gen.prompt_tokens, "new_tokens": m.gen.new_tokens,
                    "prefill_s": _r(m.gen.prefill_s), "decode_s": _r(m.gen.decode_s),
                    "tokens_per_s": _r(m.gen.tokens_per_s, 2)},
            "tts": {"sentences": m.sentences, "audio_s": _r(m.audio_s), "compute_s": _r(m.tts_compute_s),
                    "rtf": _r(m.tts_compute_s / m.audio_s if m.audio_s else None, 4),
                    # the answer's language had no voice (tts.voices): shown, not spoken
                    "no_voice": getattr(m, "no_voice", None) or None},
        })
    return {"answer_method": cfg.llm.answer_method,
            "predgen_verifier": cfg.llm.predgen_verifier if cfg.llm.answer_method == "predgen" else None,
            "answers": out, "answer_wav": str(result.wav) if result.wav else None, "played": bool(result.played)}


def caption_report(result, cfg: Config) -> dict:
    """The caption session's translation (``result``: :class:`engine.session.SessionResult`): per utterance its
    translation stream (updates, NE, acceptance A/D, accepted share A/O, tokens/s, compute), the means, the
    partial translations cut short, and the fidelity guard's record."""
    c = cfg.caption
    utts = [result.caption_updates[k] for k in sorted(result.caption_updates)]
    tps = [u["output_tokens_per_s"] for u in utts if u["output_tokens_per_s"]]
    caps = result.captions
    return {"method": c.method, "beta": c.beta, "mask_k": c.mask_k, "display_only": c.display_only_mask,
            "segment": c.segment, "updates": len(caps), "final": [x.translation for x in caps if x.final],
            "ne_mean": _r(np.mean([u["ne"] for u in utts])) if utts else None,
            "compute_s_mean": _r(np.mean([x.compute_s for x in caps])) if caps else None,
            "tokens_per_s_mean": _r(np.mean(tps), 2) if tps else None, "utterances": utts,
            "partials_cancelled": result.captions_cancelled, "guard": guard_report(result.translator)}


def guard_report(translator) -> dict | None:
    """The fidelity guard's checks and triggers (None when the translator has no guard)."""
    g = getattr(translator, "guard_stats", None)
    if g is None:
        return None
    return {"checked": g.checked, "triggered": g.triggered, "replacement_failed": g.replacement_failed,
            "events": [getattr(e, "__dict__", str(e)) for e in g.events]}


def summary_lines(rep: dict) -> list[str]:
    """One line each for a command report's ASR, answers and captions (what ``specvoice`` prints at the end)."""
    lines = []
    asr = rep.get("asr")
    if asr:
        lines.append(f"ASR ({asr['method']}, {asr['model_role']}): {asr['audio_s']} s audio, RTF {asr['rtf']}, "
                     f"end of speech → final transcript {asr['eos_to_final_s_mean']} s (mean)")
    for a in rep.get("answers", []):
        lines.append(f"answer ({rep.get('answer_method')}): TTFS {a['ttfs_s']} s, end of speech → first audio "
                     f"{a['eos_to_first_audio_s']} s (final transcript → first audio "
                     f"{a['final_transcript_to_first_audio_s']} s), NFETFS {a['nfetfs']}, pre-synthesised "
                     f"{a['presynth_used']}, LLM {a['llm']['tokens_per_s']} tok/s, TTS RTF {a['tts']['rtf']}")
    cap = rep.get("caption")
    if cap:
        lines.append(f"caption ({cap['method']}): {cap['updates']} updates, {cap['compute_s_mean']} s each (mean), "
                     f"{cap['tokens_per_s_mean']} output tok/s, NE {cap['ne_mean']}")
    return lines
