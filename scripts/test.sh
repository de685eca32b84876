#!/usr/bin/env bash
# README command two: install the dev requirements, lint, and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh requirements-dev.txt
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Debian's chromium for the browser test (Playwright drives it; it never downloads browsers).
command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium; } \
  || echo "chromium could not be installed: the browser test will be skipped." >&2
# Debian's Tesseract, the default OCR engine (KB_OCR_ENGINE) of scanned pages and pictures.
command -v tesseract >/dev/null || { apt-get update -qq && apt-get install -y -qq tesseract-ocr; } \
  || echo "tesseract-ocr could not be installed: the OCR tests will fail." >&2
.venv/bin/ruff check . \
  || { echo "ruff found problems: run .venv/bin/ruff check --fix . (and fix the rest by hand)." >&2; exit 1; }
.venv/bin/ruff format --check . \
  || { echo "Some files are not formatted: run .venv/bin/ruff format ." >&2; exit 1; }
# The app layers and the absence of import cycles (.importlinter); run from the project root, which
# lint-imports puts on the import path.
.venv/bin/lint-imports --no-logo \
  || { echo "An import breaks the layers or makes a cycle (.importlinter): see above." >&2; exit 1; }
.venv/bin/python manage.py makemigrations --check --dry-run >/dev/null \
  || { echo "Models changed without a migration: run manage.py makemigrations." >&2; exit 1; }
# Both cores: two pytest-xdist workers, each with its own test database and live servers, a test
# file at a time (its module fixtures built once); KB_TEST_WORKERS=0 runs in this process. The 25
# slowest tests are printed at the end of every run (docs/testing.md).
workers="${KB_TEST_WORKERS:-2}"
parallel=()
[ "$workers" != "0" ] && parallel=(-n "$workers" --dist loadfile)
exec .venv/bin/python -m pytest -q --create-db --durations=25 "${parallel[@]}" "$@"
