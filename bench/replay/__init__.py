"""Acceptance traces and their replay: every speculative method measured on any device from traces recorded with
the real models on the CPU (:mod:`bench.replay.trace` says how a trace pins down every decision).

Per family, one module with the same three entry points, each taking and returning JSON-ready dicts:

    * ``record(...)`` — real weights, on the CPU, where the model packages are: runs each method and its baseline
      on the family's benchmark inputs with every model wrapped in :class:`bench.replay.trace.RecordingLM` and writes
      the trace (the inputs each decode needs, the recorded calls per model role, the tokens it produced, the
      models' architectures);
    * ``replay(trace, device)`` — placeholder weights of the same architectures on ``device``: the product's decode
      loops, every decision from the trace; per method and baseline: seconds, passes, exact replays, speed-up;
    * ``real(trace, device)`` — the same methods with the real weights, timed the same way (the CPU validation; on a
      GPU where the weights travel).

Families: :mod:`bench.replay.asr` (CTC-SSD, SpecASR vs AR greedy on the torch Whisper decoder),
:mod:`bench.replay.llm` (PredGen vs the cascade; SSBD vs AR re-translation), :mod:`bench.replay.pcg` (PCG vs
target-only sampling on the codec LM). :mod:`bench.gpu_replay` runs them (``record``, ``validate``, ``run``).
Every replayed figure is labelled ``"replayed": true``.
"""
