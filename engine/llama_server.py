"""``python -m engine.llama_server ARGS``: llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``,
same arguments) with the weights kept out of llama.cpp's AMX buffer type on a CPU with AMX, as
:func:`engine.lm.load_llama` does in-process (ggml-org/llama.cpp#20824: the first decode after the AMX repack can
crash with a segmentation fault). On other CPUs it is ``llama_cpp.server`` unchanged.
"""

from __future__ import annotations


def main() -> None:
    from llama_cpp import llama as llama_mod
    from llama_cpp.server.__main__ import main as server_main

    from .lm import cpu_has_amx, without_extra_bufts

    if cpu_has_amx():
        low = llama_mod.llama_cpp  # this process serves one model: patched for its lifetime
        low.llama_model_default_params = without_extra_bufts(low.llama_model_default_params)
    server_main()


if __name__ == "__main__":
    main()
