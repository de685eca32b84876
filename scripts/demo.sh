#!/usr/bin/env bash
# README command one: set up, sync the smallest docs source, answer a question, serve on 127.0.0.1:8000
# while the other sources sync in the background (--no-serve: wait for them, then exit).
# --llm: also install requirements-llm.txt and answer with Qwen2.5-Coder-1.5B-Instruct, served by
# llama.cpp (manage.py localllm) on 127.0.0.1:$KB_LOCAL_LLM_PORT (default 8001) while the demo runs.
# Other arguments go to `manage.py demo` (e.g. --no-serve, --port 8080).
set -euo pipefail
cd "$(dirname "$0")/.."
llm=false
args=()
for arg in "$@"; do
  if [ "$arg" = "--llm" ]; then llm=true; else args+=("$arg"); fi
done
scripts/setup.sh requirements.txt
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if $llm; then
  scripts/setup.sh requirements-llm.txt
  port="${KB_LOCAL_LLM_PORT:-8001}"
  model=qwen2.5-1.5b
  answers() {
    .venv/bin/python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
      "http://127.0.0.1:$port/v1/models" 2>/dev/null
  }
  if answers; then
    echo "Something already answers on 127.0.0.1:$port: set KB_LOCAL_LLM_PORT to a free port." >&2
    exit 1
  fi
  log="${KB_DATA_DIR:-.kb-data}/localllm.log"
  mkdir -p "$(dirname "$log")"
  echo "Starting the local LLM $model on 127.0.0.1:$port (its log: $log)"
  # localllm assembles the model once (1.1 GB into the data folder's models/) and becomes the server.
  .venv/bin/python manage.py localllm --model "$model" --port "$port" >"$log" 2>&1 &
  llm_pid=$!
  trap 'kill "$llm_pid" 2>/dev/null || true' EXIT
  until answers; do
    kill -0 "$llm_pid" 2>/dev/null || { tail -20 "$log" >&2; echo "The local LLM server exited (above: $log)." >&2; exit 1; }
    sleep 1
  done
  # An answer over the demo's passages can take over a minute on 2 cores, hence the longer timeout.
  export OPENAI_BASE_URL="http://127.0.0.1:$port/v1" KB_LLM_MODEL="$model" KB_LLM_TIMEOUT_S="${KB_LLM_TIMEOUT_S:-600}"
  # Not exec: the trap ends the LLM server when the demo exits.
  .venv/bin/python manage.py demo ${args[@]+"${args[@]}"}
else
  exec .venv/bin/python manage.py demo ${args[@]+"${args[@]}"}
fi
