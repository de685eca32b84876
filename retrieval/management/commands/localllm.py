import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from llm.local import DEFAULT_MODEL, LOCAL_MODELS, LocalModelError, local_llm_command, local_llm_model_path


class Command(BaseCommand):
    help = "Serve a bundled local model with llama.cpp as an OpenAI-compatible API (foreground): " + "; ".join(
        f"{m.alias}: {m.description}" for m in LOCAL_MODELS.values()
    )

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8001)
        parser.add_argument(
            "--model",
            choices=list(LOCAL_MODELS),
            default=DEFAULT_MODEL,
            help=f"which local model to serve (default {DEFAULT_MODEL}, the tiny one for plumbing)",
        )
        parser.add_argument(
            "--cache",
            action="store_true",
            help="add llama-cpp-python's RAM prompt cache (restores older prompts' states; see llm/local.py)",
        )
        parser.add_argument(
            "--threads",
            type=int,
            default=None,
            help="llama.cpp threads (default KB_LOCAL_LLM_THREADS; 1 where other work shares the cores)",
        )

    def handle(self, *args, port, model, cache, threads, **options):
        local_model = LOCAL_MODELS[model]
        try:
            path = local_llm_model_path(settings.KB_DATA_DIR, model)
        except LocalModelError as exc:
            raise CommandError(f"{exc} ({local_model.install_hint})") from exc
        self.stdout.write(
            f"Serving {model} at http://127.0.0.1:{port}/v1 — set OPENAI_BASE_URL=http://127.0.0.1:{port}/v1 "
            f"KB_LLM_MODEL={model}",
        )
        self.stdout.flush()
        if threads is not None and threads < 1:
            raise CommandError("--threads must be 1 or more.")
        threads = threads or settings.KB_LOCAL_LLM_THREADS
        command = local_llm_command(local_model, path, port=port, cache=cache, threads=threads)
        os.chdir(settings.BASE_DIR)  # so ``-m llm.local_server`` resolves
        os.execv(command[0], command)
