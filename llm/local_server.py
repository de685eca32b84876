"""Entry point of the local LLM server: ``python -m llm.local_server <llama_cpp.server args>``.

It runs ``llama_cpp.server`` with llama.cpp's extra buffer types (weight repacking) turned
off: on CPUs with AMX, ggml's AMX matrix kernels crash the server on the first inference
(SIGSEGV in ``ggml_backend_amx_mul_mat``), and the tiny model gains nothing from repacking.
Needs no Django settings and imports none of the apps.
"""

from __future__ import annotations


def _without_extra_buffer_types() -> None:
    import llama_cpp
    import llama_cpp.llama as llama_module

    default_params = llama_cpp.llama_model_default_params

    def params():
        value = default_params()
        value.use_extra_bufts = False
        return value

    llama_module.llama_cpp.llama_model_default_params = params


if __name__ == "__main__":
    _without_extra_buffer_types()
    from llama_cpp.server.__main__ import main

    main()
