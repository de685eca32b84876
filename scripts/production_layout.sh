#!/usr/bin/env bash
# The production layout on one machine: PostgreSQL as a separate server reached through
# DATABASE_URL (TCP and a password), Redis as the Celery broker, gunicorn serving the app, Celery
# workers in processes of their own and Celery beat (docs/deployment.md).
#
#   scripts/production_layout.sh up            # start everything (idempotent), print the URLs
#   scripts/production_layout.sh workers N     # restart the Celery workers as N processes
#   scripts/production_layout.sh env           # the variables that reach the layout (eval them)
#   scripts/production_layout.sh down          # stop everything this script started
#
# Environment: KB_LAYOUT_DIR (pids, logs, the database's files; default $KB_DATA_DIR/layout),
# KB_PG_PORT (55432), REDIS_URL (redis://127.0.0.1:6379/0), KB_CELERY_WORKERS (2), KB_BIND
# (127.0.0.1:8000), KB_WEB_WORKERS / KB_WEB_THREADS (config/gunicorn_conf.py), KB_DATA_DIR
# (shared by the web server and the workers: uploads are stored there and read by the workers).
# Each worker embeds with cores / workers threads unless KB_WORKER_EMBED_THREADS says otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export KB_DATA_DIR="${KB_DATA_DIR:-$PWD/.kb-data}"
LAYOUT="${KB_LAYOUT_DIR:-$KB_DATA_DIR/layout}"
PG_PORT="${KB_PG_PORT:-55432}"
WORKERS="${KB_CELERY_WORKERS:-2}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"
export CELERY_BROKER_URL="$REDIS_URL"
export KB_BIND="${KB_BIND:-127.0.0.1:8000}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false DEBUG="${DEBUG:-false}"
# Prometheus multiprocess mode: gunicorn's and the Celery workers' values in one directory, which
# /metrics adds up (docs/telemetry.md); emptied by 'up' when none of them runs yet.
export PROMETHEUS_MULTIPROC_DIR="${PROMETHEUS_MULTIPROC_DIR:-$LAYOUT/metrics}"
mkdir -p "$LAYOUT"

database_up() {
  DATABASE_URL="$($PY scripts/remote_postgres.py start "$LAYOUT/postgres" --port "$PG_PORT")"
  export DATABASE_URL
  printf 'export DATABASE_URL=%q CELERY_BROKER_URL=%q KB_DATA_DIR=%q\n' \
    "$DATABASE_URL" "$CELERY_BROKER_URL" "$KB_DATA_DIR" >"$LAYOUT/env"
}

pid_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

workers_start() {
  local n="$1" threads
  threads="${KB_WORKER_EMBED_THREADS:-$(($(nproc) / n > 0 ? $(nproc) / n : 1))}"
  # N nodes (celery1 ... celeryN), each a main process and one pool process (prefork: the hard
  # time limit needs it); one task at a time each (CELERY_WORKER_PREFETCH_MULTIPLIER=1).
  KB_EMBED_THREADS="$threads" .venv/bin/celery multi start "$n" -A config --pool=prefork -c 1 -l info \
    --pidfile="$LAYOUT/%n.pid" --logfile="$LAYOUT/%n.log" >/dev/null
  for i in $(seq 1 "$n"); do
    for _ in $(seq 1 100); do pid_alive "$LAYOUT/celery$i.pid" && break; sleep 0.2; done
    pid_alive "$LAYOUT/celery$i.pid" || { echo "Celery worker celery$i did not start: see $LAYOUT/celery$i.log" >&2; exit 1; }
  done
  echo "$n" >"$LAYOUT/workers"
}

workers_stop() {
  local n
  n="$(cat "$LAYOUT/workers" 2>/dev/null || echo 0)"
  if ((n > 0)); then
    .venv/bin/celery multi stopwait "$n" -A config --pidfile="$LAYOUT/%n.pid" >/dev/null 2>&1 || true
  fi
  rm -f "$LAYOUT/workers" "$LAYOUT"/celery*.pid  # a killed worker's pid file stays behind
}

stop_pidfile() {  # TERM the process of a pid file, wait up to 30 s, then KILL it
  local file="$1" pid
  pid_alive "$file" || { rm -f "$file"; return 0; }
  pid="$(cat "$file")"
  kill -TERM "$pid"
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  rm -f "$file"
}

case "${1:-}" in
  up)
    database_up
    $PY manage.py migrate --noinput -v0
    $PY manage.py collectstatic --noinput -v0
    if ! pid_alive "$LAYOUT/gunicorn.pid" && [[ ! -f "$LAYOUT/workers" ]]; then
      rm -f "$PROMETHEUS_MULTIPROC_DIR"/*.db
    fi
    mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
    if ! pid_alive "$LAYOUT/gunicorn.pid"; then
      .venv/bin/gunicorn -c config/gunicorn_conf.py config.wsgi:application \
        --daemon --pid "$LAYOUT/gunicorn.pid" --error-logfile "$LAYOUT/gunicorn.log"
    fi
    [[ -f "$LAYOUT/workers" ]] || workers_start "$WORKERS"
    if ! pid_alive "$LAYOUT/beat.pid"; then
      .venv/bin/celery -A config beat --detach -l info --pidfile="$LAYOUT/beat.pid" \
        --logfile="$LAYOUT/beat.log" --schedule="$LAYOUT/beat-schedule"
    fi
    for _ in $(seq 1 300); do
      curl -fsS -o /dev/null "http://$KB_BIND/login/" && break
      sleep 0.5
    done
    curl -fsS -o /dev/null "http://$KB_BIND/login/" \
      || { echo "gunicorn does not answer on $KB_BIND: see $LAYOUT/gunicorn.log" >&2; exit 1; }
    echo "web:      http://$KB_BIND/ (gunicorn, config/gunicorn_conf.py)"
    echo "database: ${DATABASE_URL%%:*}://postgres:***@127.0.0.1:$PG_PORT/knowledge_base"
    echo "broker:   $CELERY_BROKER_URL, $(cat "$LAYOUT/workers") Celery worker processes and beat"
    echo "logs:     $LAYOUT/*.log; variables: eval \"\$(scripts/production_layout.sh env)\""
    ;;
  workers)
    [[ -f "$LAYOUT/env" ]] || { echo "Run '$0 up' first." >&2; exit 1; }
    # shellcheck disable=SC1091
    source "$LAYOUT/env"
    workers_stop
    workers_start "${2:?workers N}"
    ;;
  env)
    cat "$LAYOUT/env"
    ;;
  down)
    stop_pidfile "$LAYOUT/gunicorn.pid"
    workers_stop
    stop_pidfile "$LAYOUT/beat.pid"
    $PY scripts/remote_postgres.py stop "$LAYOUT/postgres"
    ;;
  *)
    sed -n '2,14p' "$0" >&2
    exit 2
    ;;
esac
