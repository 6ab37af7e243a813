"""Every benchmark behind a README figure, one after another: ``specvoice bench all [--out DIR]``.

Each job writes one JSON under ``--out`` (default: bench/results/), the file the README cites for its figures.
A job is one ``specvoice`` command line with the inputs and settings of the run the README reports (pinned here
rather than left to each benchmark's defaults, so a changed default does not silently change a published figure).
``specvoice assist`` jobs run on the embedded question and keep the command's own ``assist-report.json`` under
the job's file name.

Jobs run one at a time, each in its own Python process (memory and threads do not carry over from one benchmark
to the next), with the repository root as working directory. A job writes into a scratch folder; its file moves
into ``--out`` only when the command exits 0, so a failed or interrupted run never replaces a committed result
(the scratch folder is kept and named for inspection). A failing job is reported and the next one runs; the exit
status is 1 when any job failed, 130 when interrupted. At the end a table lists job, seconds, status and output.

One job is not a benchmark: ``tests-slow`` runs the slow-marked tests (``python -m pytest -m slow``; the default
pytest run leaves them out) and its JSON records each test's outcome and duration, the counts and pytest's exit
status (tests/conftest.py's ``--results-json``). Like any job, a run with a failing test is reported as failed and its
file stays in the kept scratch folder.

Options: ``--list`` (the jobs, their commands and estimated durations; runs nothing), ``--only NAME ...``,
``--skip-slow`` (leave out jobs estimated over 10 minutes on a 2-core CPU), ``--dry-run`` (print what would run).
``--device cuda|cpu [--tiny]`` runs the GPU suite instead (bench/gpu_suite.py: every stage on that device, its
JSONs under bench/results/gpu/<device>/).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_OUT = HERE / "results"
SLOW_S = 600  # a job estimated above this many seconds (2-core CPU) is "slow"

OUT = "{out}"  # placeholder in a job's argv: the JSON file the command writes
SCRATCH = "{scratch}"  # placeholder: a folder for commands that name their own report file

ENTRY = ["-m", "app.cli"]  # the ``specvoice`` entry point, run as ``python -m app.cli``
PYTEST_ENTRY = ["-m", "pytest"]  # a job whose tool is "pytest": the test suite, from the repository root

ASR_METHODS = ("ar,ar_ct2,ssd_acc,ssd_rtfx,ssd_acc_rejoin,ssd_rtfx_rejoin,"
               "sd8,sd16,sd8x2,adaptive,recycling,tree,ctc_draft")
MTBENCH_PARTIALS = "bench/data/mtbench_asr_partials.json"
VOICE_PARTIALS = "bench/data/voice_asr_partials.json"
# the README's PredGen table: 8 tokens per update, 48 answer tokens per turn, top-3, speculation on every core (0)
PREDGEN_TABLE = ["--budget", "8", "--max-tokens", "48", "--top-k", "3", "--speculation-threads", "0"]


@dataclass(frozen=True)
class Job:
    """One benchmark run and the file it produces.

    Attributes:
        name: the job's name (``--only``).
        output: file name under ``--out``.
        argv: the ``specvoice`` command line, with :data:`OUT` for the output file and :data:`SCRATCH` for a
            scratch folder.
        estimate_s: expected wall time on a 2-core CPU, seconds (from the committed JSON's own timings where it
            records them).
        report: for a command that names its own file (``assist`` writes ``OUT/assist-report.json``): that file's
            name inside :data:`SCRATCH`, kept as ``output``. None: the command writes :data:`OUT` itself.
        about: what the job measures (printed by ``--list``).
        tool: "specvoice" (``argv`` is a ``specvoice`` command line) or "pytest" (``argv`` is ``python -m pytest``'s).
    """

    name: str
    output: str
    argv: tuple[str, ...]
    estimate_s: int
    report: str | None = None
    about: str = ""
    tool: str = "specvoice"

    @property
    def slow(self) -> bool:
        """True when the job is expected to take more than 10 minutes on a 2-core CPU."""
        return self.estimate_s > SLOW_S

    @property
    def bench(self) -> str | None:
        """The benchmark name (``specvoice bench NAME``), or None for another command."""
        return self.argv[1] if self.tool == "specvoice" and self.argv[0] == "bench" else None

    @property
    def entry(self) -> list[str]:
        """The Python arguments before :meth:`args` that start the job's tool (``python -m app.cli`` or
        ``python -m pytest``)."""
        return ENTRY if self.tool == "specvoice" else PYTEST_ENTRY

    @property
    def prefix(self) -> str:
        """The tool as a user types it: "specvoice" or "python -m pytest"."""
        return "specvoice" if self.tool == "specvoice" else "python -m pytest"

    def args(self, output: Path | str, scratch: Path | str) -> list[str]:
        """The command line with the placeholders filled in."""
        return [a.replace(OUT, str(output)).replace(SCRATCH, str(scratch)) for a in self.argv]

    def command(self, out_dir: Path | str, scratch: Path | str = "SCRATCH") -> str:
        """The command as a user would type it, writing into ``out_dir``."""
        target = Path(out_dir) / self.output
        line = f"{self.prefix} " + shlex.join(self.args(target, scratch))
        if self.report:
            line += f"  && cp {shlex.quote(str(Path(scratch) / self.report))} {shlex.quote(str(target))}"
        return line


# the default beside its baselines on conversational speech (the conversation and language jobs)
CONVERSATION_METHODS = "default,ar_final_greedy,ar_final_beam5,ar_final_retry,ar_context_repeat_off,ar_no_yield"


def _bench(name: str, *args: str) -> tuple[str, ...]:
    return ("bench", name, *args, "--out", OUT)


def _assist(method: str) -> tuple[str, ...]:
    return ("assist", "--no-play", "--set", f"llm.answer_method={method}", "--out", SCRATCH)


JOBS: tuple[Job, ...] = (
    # -- the latency report (README "The latency report") --------------------------------------------------------
    Job("assist-predgen", "assist_predgen.json", _assist("predgen"), 60, report="assist-report.json",
        about="specvoice assist on the embedded question, real-time pace, PredGen answer"),
    Job("assist-cascade", "assist_cascade.json", _assist("cascade"), 60, report="assist-report.json",
        about="specvoice assist on the embedded question, real-time pace, cascade answer"),
    # -- PredGen ---------------------------------------------------------------------------------------------------
    Job("predgen-mtbench", "predgen_mtbench_qwen1.5b.json",
        _bench("predgen", "--prompts", "mtbench", "--n", "10",
               "--methods", "cascade_prefill", "greedy", "top_k", "reflection", *PREDGEN_TABLE), 1000,
        about="MT-Bench first turns revealed at 600 chars/min"),
    Job("predgen-asr-partials", "predgen_asr_partials_qwen1.5b.json",
        _bench("predgen", "--stream", MTBENCH_PARTIALS, "--n", "10",
               "--methods", "cascade_prefill", "greedy", "top_k", "reflection", *PREDGEN_TABLE), 750,
        about="MT-Bench spoken → real streaming-ASR partials"),
    Job("predgen-gsm8k", "predgen_gsm8k_qwen1.5b.json",
        _bench("predgen", "--prompts", "gsm8k", "--n", "5",
               "--methods", "cascade_prefill", "greedy", "top_k", *PREDGEN_TABLE), 380,
        about="GSM8K questions revealed at 600 chars/min"),
    Job("predgen-remote", "remote_predgen_voice_asr_partials_qwen0.5b.json",
        _bench("predgen", "--backend", "remote", "--stream", VOICE_PARTIALS, "--n", "6", "--role", "llm_draft",
               "--server-threads", "1", "--local-threads", "1", "--speculation-threads", "1"), 3600,
        about="PredGen in-process vs over llama_cpp.server on the same streams (requests, bytes, answers)"),
    Job("predgen-torch-exactness", "predgen_torch_exactness_qwen0.5b.json",
        _bench("predgen", "--backend", "torch", "--role", "llm_draft", "--stream", VOICE_PARTIALS, "--n", "12",
               "--methods", "cascade_prefill", "greedy"), 3600,
        about="the same streams on the 0.5B's GGUF weights dequantised into float32 torch: answer identity "
              "(needs the torch-gguf extra)"),
    Job("predgen-voice-asr-partials", "predgen_voice_asr_partials.json",
        _bench("predgen", "--stream", VOICE_PARTIALS, "--n", "12"), 900,
        about="the voice benchmark's spoken questions → streaming-ASR partials (benchmark defaults)"),
    # -- SSBD ------------------------------------------------------------------------------------------------------
    Job("ssbd-multi30k", "ssbd_multi30k_qwen1.5b.json",
        _bench("ssbd", "--n", "15", "--betas", "0.0", "0.1", "0.2", "0.3", "0.4", "--ks", "3", "5",
               "--max-tokens", "96"), 1200,
        about="Multi30k test 2016 en→de streamed lag-3: AR vs SSBD β sweep, mask-k, display-only mask-k"),
    Job("ssbd-asr-partials", "ssbd_asr_partials_qwen1.5b.json",
        _bench("ssbd", "--stream", MTBENCH_PARTIALS, "--n", "10", "--betas", "0.0", "0.2", "--ks", "3",
               "--max-tokens", "96"), 1070,
        about="SSBD on real streaming-ASR partials (no references)"),
    # -- streaming ASR ---------------------------------------------------------------------------------------------
    Job("asr-stream", "asr_stream.json", _bench("asr-stream"), 4500,
        about="every method (the default, beam-5 finals, whole-utterance finals over 20 s pieces, trimmed words "
              "from LocalAgreement-2's commits, no audio kept before a trim's cut, SSD, lossless SSD, SpecASR, the "
              "padded 30 s window) in real time through the transcribe path, the whole corpus (329 s)"),
    Job("asr-stream-repeat", "asr_stream_repeat.json", _bench("asr-stream", "--methods", "ar,ar_no_overlap"), 900,
        about="the default and the no-overlap row again, a separate run: how far a second real-time run of the "
              "same configuration moves WER and latency"),
    Job("asr-stream-heldout", "asr_stream_heldout.json",
        _bench("asr-stream", "bench/data/stream_speech_heldout", "bench/data/stream_speech_heldout/nonspeech",
               "--methods", "ar,ar_final_beam5,ar_padded"), 1300,
        about="the default, beam-5 finals and the padded 30 s window on a second corpus that no setting was chosen "
              "on (python -m bench.make_speech --seed 20261126: other voices, rates, pauses and noise)"),
    Job("asr-offline", "asr_offline_shift.json", _bench("asr-offline"), 1020,
        about="the noise floor of the streaming WER target: offline greedy and beam 5 on both corpora, again after "
              "0.05-0.5 s of silence put before each file, scored against the unshifted beam-5 transcript"),
    Job("conversation", "conversation.json",
        _bench("conversation", "--corpus", "conversation,real", "--methods", CONVERSATION_METHODS), 3300,
        about="conversational speech in real time (bench/data/conversation: 2-4 voices, hesitations, fillers, "
              "restarts, backchannels, overlaps; clean, reverb, babble, telephone) and the English real recordings: "
              "WER vs text and offline beam 5 per file and condition, offline greedy in the same run, for the default "
              "(beam 3 on the final text's decode) beside a greedy final, a beam-5 final, the final's padded "
              "re-decode, finals that keep the acoustic context written again (asr.context_repeat_words = 0) and "
              "updates that do not yield to the pause's decode (asr.yield_to_pause = false); compute split into the "
              "live path and the second pass"),
    Job("language", "language.json",
        _bench("conversation", "--corpus", "multilingual,langid", "--methods", CONVERSATION_METHODS), 1800,
        about="asr.language=auto in real time: the English-German read text (each utterance's language, the German "
              "part's WER against offline Whisper in its detected language) for the conversation job's methods, and "
              "French/German/Spanish utterances (bench/data/conversation/langid): language ID per utterance, each "
              "alone and as one stream (beside each decode identified by its own window alone, "
              "asr.language_pool = false, and with the languages named), captions into English (chrF)"),
    Job("language-english", "language_english.json",
        _bench("conversation", "--corpus", "conversation,real", "--methods", "default,ar_language_auto"), 1300,
        about="what asr.language=auto costs English: the English corpora of the conversation job in real time, the "
              "default (asr.language = en) beside each utterance's language identified (ar_language_auto): WER vs "
              "text and offline beam 5, final latency, compute, and the share of utterances identified as English"),
    Job("causal-final", "conversation_causal.json", _bench("causal-final"), 700,
        about="what a live final loses by not hearing the future: at each end of speech of the conversation job's "
              "default run, offline Whisper on all the audio heard so far (+ 0, 1, 3 s of look-ahead), against "
              "offline beam 5 and the text (run after the conversation job: it reads conversation.json)"),
    Job("vad-gate", "vad_gate.json", _bench("vad-gate"), 60,
        about="the VAD's near-talker gate on development conversations (seeds 7-9, babble and clean): near-talker "
              "speech lost against quiet per vad.near_snr_db, and the default that loses none"),
    # -- ASR decoding ----------------------------------------------------------------------------------------------
    Job("asr", "asr.json", _bench("asr", "--methods", ASR_METHODS), 1320,
        about="every decoding method on the same encoder output, 41 held-out inputs"),
    Job("asr-streaming", "asr_streaming.json", _bench("asr", "--streaming", "10"), 340,
        about="re-decode every 1 s of a growing buffer: faster-whisper AR vs SSD-CT2 vs SSD-CT2 without a draft"),
    # -- codec TTS -------------------------------------------------------------------------------------------------
    Job("tts", "tts.json",
        _bench("tts", "--n", "100", "--methods", "ar,sd,ssd,pcg0.42,pcg0.5,pcg0.6", "--lookahead", "3",
               "--val", "20", "--select-thetas", "0.42,0.5,0.6", "--select-lookaheads", "2,3,4", "--seed", "0"), 1500,
        about="codec TTS sampling: target-only vs SD vs SSD bias vs PCG θ sweep (θ, L_d chosen on validation), "
              "Whisper CER"),
    Job("tts-stages", "tts_stages.json", _bench("tts", "--stages", "--n", "100"), 900,
        about="codec TTS: Whisper CER stage by stage (teacher, codec round trip, LM on the teacher's prior, full)"),
    # -- voice to voice --------------------------------------------------------------------------------------------
    Job("voice", "voice.json", _bench("voice", "--methods", "cascade", "cascade_sentence", "cascade_prefill",
                                      "predgen", "predgen_sentence"), 1500,
        about="spoken questions in real time through VAD → streaming ASR → answer → TTS, per answer method and "
              "first-piece rule (clause vs whole sentence)"),
    Job("voice-turn", "voice_turn.json",
        _bench("voice", "--methods", "cascade", "predgen", "predgen_llm_turn", "predgen_first_clause",
               "predgen_fast_turn"), 1500,
        about="the same spoken questions: the default, the end of turn from the LLM's end-of-turn probability, "
              "updates that go on to the first clause, and both; end of speech → first audio split into turn "
              "decision, final, first text and its audio"),
    Job("voice-source", "voice_source.json", _bench("voice", "--methods", "predgen", "predgen_partial"), 900,
        about="the same spoken questions, PredGen speculating on the ASR's hypothesis of the final transcript (the "
              "default) vs on the partial transcript as shown: first answer audio, accepted tokens, NFETFS"),
    Job("voice-codec", "voice_codec.json",
        _bench("voice", "--methods", "predgen", "predgen_codec", "predgen_codec_pcg"), 1200,
        about="the same spoken questions answered by PredGen and spoken by Piper, by the codec-token TTS "
              "(target-only) and by the codec TTS with PCG: end of speech → first answer audio, the voice's RTF"),
    # -- duplex and long sessions ----------------------------------------------------------------------------------
    Job("caption", "caption.json", _bench("caption", "--methods", "ar", "ssbd", "ssbd_partial"), 3600,
        about="live captions on 100 spoken inputs, Qwen 1.5B: AR re-translation and SSBD (partial captions translate "
              "the ASR's hypothesis of the final transcript, the default, or the partial transcript), SSBD shown with "
              "every display-only mask-k (chosen on the validation split; answers vs translations, chrF, NE, latency)"),
    Job("caption-segment", "caption_segment.json",
        _bench("caption", "bench/data/caption/va0*.flac", "bench/data/caption/mt10*.flac",
               "bench/data/caption/mt14*.flac", "bench/data/caption/mt15*.flac", "bench/data/caption/m30k01*.flac",
               "bench/data/caption/m30k02*.flac", "--methods", "ssbd_sentence", "ssbd_utterance"), 1200,
        about="SSBD translating sentence by sentence vs the whole utterance, 42 of the caption files, one run"),
    Job("caption-prompt", "caption_prompt.json", _bench("caption-prompt"), 600,
        about="captions into English from German, French and Spanish text, Qwen 1.5B: the prompt with worked pairs in "
              "the source language against no worked pairs (quote-wrapped, echoed, untranslated, chrF)"),
    Job("caption-0.5b", "caption_qwen0.5b.json",
        _bench("caption", "--methods", "ar", "ssbd", "--set", "caption.model_role=llm_draft"),
        1800, about="the same 100 files with the 0.5B LLM (AR and SSBD, SSBD shown with every display-only mask-k)"),
    Job("duplex", "duplex.json", _bench("duplex", "--no-llm"), 600,
        about="echo cancellation, barge-in and end of turn on simulated rooms (audio time)"),
    Job("duplex-turn", "duplex_turn.json", _bench("duplex", "--only", "turn"), 900,
        about="end of turn on the duplex turn set: VAD silences, Smart Turn and the LLM's end-of-turn probability "
              "(its threshold chosen on development turns; the verdict's ASR + LLM compute measured on this CPU)"),
    Job("voices", "voices.json", _bench("voices"), 1800,
        about="voices per language: Whisper-base CER and RTF of fr/de/es answers read by the English Piper voice, "
              "espeak-ng and Kokoro-82M (2 styles); the gate for adopting Kokoro"),
    Job("wake", "wake.json", _bench("wake"), 1800,
        about="the wake phrase (duplex.wake_phrase): misses of three phrases said by 11 voices, alone and before a "
              "question, clean/reverb/babble/telephone; false wakes per hour over >= 1 h of speech without it; near "
              "misses; the decision's latency in ASR updates and audio seconds; a tolerance sweep"),
    Job("duplex-seeds", "duplex_seeds.json",
        _bench("duplex", "--only", "echo", "--no-wer", "--seed", "1", "--extra-seeds", "2,3"), 600,
        about="the duplex benchmark's barge-in part on three more seeds of its generator (audio time)"),
    Job("soak", "soak.json", _bench("soak", "--minutes", "60", "--speed", "1"), 3700,
        about="an hour of speech through the live transcription pipeline: RSS, queues, latency per 10 min"),
    # -- the replay of every method on a GPU, validated on this CPU ------------------------------------------------
    Job("replay-validation", "replay_validation.json", _bench("gpu-replay", "validate"), 1500,
        about="every speculative method and its baseline replayed from the committed acceptance traces on placeholder "
              "weights beside the real weights on the CPU, same inputs, one run: replayed vs real speed-up (±10 %)"),
    # -- the slow-marked tests -------------------------------------------------------------------------------------
    Job("tests-slow", "tests_slow.json", ("-m", "slow", "--results-json", OUT), 1800, tool="pytest",
        about="the slow-marked tests, which the default pytest run leaves out (end to end: an hour of speech, the "
              "desktop app, an LLM server): each test's outcome and duration"),
)


def job_names(jobs=None) -> list[str]:
    return [j.name for j in (JOBS if jobs is None else jobs)]


def _fmt_s(s: float) -> str:
    return f"{s / 60:.0f} min" if s >= 90 else f"{s:.0f} s"


def _show(p: Path) -> str:
    """``p`` relative to the working directory when it lies below it."""
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def _print_jobs(jobs, out_dir: Path, header: str, machine: str = "a 2-core CPU") -> None:
    print(header)
    for j in jobs:
        flag = ", slow" if j.slow else ""
        print(f"\n{j.name}  → {_show(out_dir / j.output)}  (~{_fmt_s(j.estimate_s)}{flag})")
        if j.about:
            print(f"    {j.about}")
        print(f"    {j.command(_show(out_dir))}")
    total = sum(j.estimate_s for j in jobs)
    print(f"\n{len(jobs)} job(s), ~{_fmt_s(total)} in all on {machine}")


def run_job(job: Job, out_dir: Path) -> tuple[str, Path | None]:
    """Run one job in its own process; on success its file moves into ``out_dir``. Returns (status: "ok",
    "failed (...)" or "interrupted"; the scratch folder kept for inspection, or None)."""
    scratch = Path(tempfile.mkdtemp(prefix=f"specvoice-bench-{job.name}-"))
    produced = scratch / (job.report or job.output)
    entry = job.entry
    cmd = [sys.executable, *entry, *job.args(scratch / job.output, scratch)]
    print(f"$ {job.prefix} {shlex.join(cmd[1 + len(entry):])}", flush=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        rc = subprocess.run(cmd, cwd=ROOT, env=env).returncode
    except KeyboardInterrupt:
        return "interrupted", scratch
    if rc != 0:
        return f"failed (exit {rc})", scratch
    if not produced.is_file():
        return f"failed (no {produced.name})", scratch
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.move(str(produced), str(out_dir / job.output))
    shutil.rmtree(scratch, ignore_errors=True)
    return "ok", None


def _table(rows: list[tuple[str, str, str, str]]) -> None:
    head = ("job", "seconds", "status", "output")
    w = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    for r in [head, tuple("-" * n for n in w), *rows]:
        print("  ".join(c.ljust(w[i]) if i != 1 else c.rjust(w[i]) for i, c in enumerate(r)).rstrip())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="specvoice bench all",
        description="Every benchmark behind a README figure, one after another, each in its own process; "
                    "results replace the files under --out only when their job succeeds.")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="folder for the result JSONs (default: bench/results/; with --device: see bench/gpu_suite.py)")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="instead of the README's jobs, the GPU suite (bench/gpu_suite.py) with every stage on this "
                        "device; cuda without a visible CUDA device fails at once")
    p.add_argument("--tiny", action="store_true",
                   help="with --device: the suite's jobs on the smallest inputs (a check that they run, not a result)")
    p.add_argument("--list", action="store_true", help="print the jobs and the command each runs; run nothing")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these jobs (names as --list prints them)")
    p.add_argument("--skip-slow", action="store_true", help=f"leave out jobs estimated over {SLOW_S // 60} minutes")
    p.add_argument("--dry-run", action="store_true", help="print what would run, in order; run nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark jobs (``argv`` as for ``specvoice bench all``). Returns 0 when every job that ran
    succeeded, 1 when any failed, 130 when interrupted."""
    ap = _parser()
    a = ap.parse_args(argv)
    jobs, suite = list(JOBS), None
    if a.device:
        from bench.gpu_suite import Suite, SuiteError

        try:
            suite = Suite(a.device, tiny=a.tiny)
        except SuiteError as e:
            print(f"specvoice bench all: error: {e}", file=sys.stderr)
            return 2
        jobs = [Job(**j) for j in suite.jobs]
    elif a.tiny:
        ap.error("--tiny needs --device")
    out_dir = Path(a.out or (suite.default_out if suite else DEFAULT_OUT)).expanduser().resolve()
    machine = (suite.estimates_on,) if suite else ()
    if a.only:
        unknown = [n for n in a.only if n not in job_names(jobs)]
        if unknown:
            ap.error(f"unknown job(s) {', '.join(unknown)}; choose from: {', '.join(job_names(jobs))}")
        jobs = [j for j in jobs if j.name in a.only]
    if a.list:
        _print_jobs(jobs, out_dir, f"benchmark jobs (outputs under {_show(out_dir)}):", *machine)
        return 0
    skipped = [j for j in jobs if a.skip_slow and j.slow]
    todo = [j for j in jobs if j not in skipped]
    if a.dry_run:
        _print_jobs(todo, out_dir, f"dry run: would run, in this order (outputs under {_show(out_dir)}):", *machine)
        if skipped:
            print("skipped (slow): " + ", ".join(j.name for j in skipped))
        return 0
    if suite is not None:
        suite.start(out_dir)  # the jobs' configuration (every stage on --device) and out_dir/device.json

    rows: dict[str, tuple[str, str, str, str]] = {
        j.name: (j.name, "-", "skipped (slow)", "-") for j in skipped}
    failed = interrupted = False
    for i, job in enumerate(todo, 1):
        print(f"\n=== [{i}/{len(todo)}] {job.name} → {_show(out_dir / job.output)} (~{_fmt_s(job.estimate_s)})",
              flush=True)
        t0 = time.monotonic()
        try:
            status, kept = run_job(job, out_dir)
        except OSError as e:  # the process could not start, or the result could not be moved into place
            status, kept = f"failed ({e})", None
        secs = f"{time.monotonic() - t0:.0f}"
        interrupted = status == "interrupted"
        if status != "ok":
            failed = True
            print(f"bench all: {job.name} {status}" + (f"; its scratch folder is kept: {kept}" if kept else ""),
                  file=sys.stderr, flush=True)
        rows[job.name] = (job.name, secs, status, _show(out_dir / job.output) if status == "ok" else "-")
        if interrupted:
            break
    for j in todo:
        rows.setdefault(j.name, (j.name, "-", "not run", "-"))
    print()
    _table([rows[j.name] for j in jobs])
    if interrupted:
        return 130
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
