import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from llm.local import MODEL_ALIAS, local_llm_command, local_llm_model_path


class Command(BaseCommand):
    help = "Serve the bundled Gemma 3 270M GGUF with llama.cpp as an OpenAI-compatible API (foreground)."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8001)

    def handle(self, *args, port, **options):
        try:
            model = local_llm_model_path(settings.KB_DATA_DIR)
        except ImportError as exc:
            raise CommandError("Install the LLM extras: pip install -r requirements-dev.txt") from exc
        self.stdout.write(
            f"Serving {MODEL_ALIAS} at http://127.0.0.1:{port}/v1 — set OPENAI_BASE_URL=http://127.0.0.1:{port}/v1 "
            f"KB_LLM_MODEL={MODEL_ALIAS}"
        )
        command = local_llm_command(model, port=port)
        os.chdir(settings.BASE_DIR)  # so ``-m llm.local_server`` resolves
        os.execv(command[0], command)
