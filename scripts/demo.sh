#!/usr/bin/env bash
# README command one: set up, ingest the Django 5.2 docs, answer a question, serve on 127.0.0.1:8000.
# Extra arguments go to `manage.py demo` (e.g. --no-serve, --port 8080).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh requirements.txt
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/python manage.py demo "$@"
