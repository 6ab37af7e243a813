"""``python -m engine.llm.llama_server ARGS``: llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``,
same arguments) with the weights kept out of llama.cpp's AMX buffer type on a CPU with AMX, as
:class:`engine.llm.llama_cpp_lm.LlamaCppLM` does in-process (:func:`engine.llm.llama_cpp_lm.keep_llama_weights_out_of_amx`;
ggml-org/llama.cpp#20824: the first decode after the AMX repack can crash with a segmentation fault). On other CPUs
it is ``llama_cpp.server`` unchanged.
"""

from __future__ import annotations


def main() -> None:
    from llama_cpp.server.__main__ import main as server_main

    from engine.llm.llama_cpp_lm import keep_llama_weights_out_of_amx

    keep_llama_weights_out_of_amx()
    server_main()


if __name__ == "__main__":
    main()
