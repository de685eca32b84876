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
# KB_PG_REPLICAS (1) streaming replicas of the database on ports KB_PG_REPLICA_PORT (55433) and up,
# which search, ask and the portal's reading pages read from (DATABASE_REPLICA_URLS; 0: none).
# Each worker embeds with cores / workers threads unless KB_WORKER_EMBED_THREADS says otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export KB_DATA_DIR="${KB_DATA_DIR:-$PWD/.kb-data}"
LAYOUT="${KB_LAYOUT_DIR:-$KB_DATA_DIR/layout}"
PG_PORT="${KB_PG_PORT:-55432}"
REPLICAS="${KB_PG_REPLICAS:-1}"
REPLICA_PORT="${KB_PG_REPLICA_PORT:-55433}"
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
  # Streaming replicas (pg_basebackup -R from the primary, hot standbys on ports of their own).
  local urls=() i
  for ((i = 1; i <= REPLICAS; i++)); do
    urls+=("$($PY scripts/replica_postgres.py start "$LAYOUT/replica$i" --primary "$DATABASE_URL" \
      --port $((REPLICA_PORT + i - 1)))")
  done
  DATABASE_REPLICA_URLS="$(IFS=,; echo "${urls[*]}")"
  export DATABASE_REPLICA_URLS
  printf 'export DATABASE_URL=%q DATABASE_REPLICA_URLS=%q CELERY_BROKER_URL=%q KB_DATA_DIR=%q\n' \
    "$DATABASE_URL" "$DATABASE_REPLICA_URLS" "$CELERY_BROKER_URL" "$KB_DATA_DIR" >"$LAYOUT/env"
}

pid_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

workers_start() {
  local n="$1" threads
  threads="${KB_WORKER_EMBED_THREADS:-$(($(nproc) / n > 0 ? $(nproc) / n : 1))}"
  # N nodes (celery1 ... celeryN), each a main process and one pool process (prefork: the hard
  # time limit needs it); one task at a time each (CELERY_WORKER_PREFETCH_MULTIPLIER=1).
  # With KB_EMBED_QUEUE set (embedding on a queue of its own), these workers take that queue too:
  # one machine, no GPU worker of its own (docs/scale.md, GPU workers).
  KB_EMBED_THREADS="$threads" .venv/bin/celery multi start "$n" -A config --pool=prefork -c 1 -l info \
    -Q "celery${KB_EMBED_QUEUE:+,$KB_EMBED_QUEUE}" \
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
    ((REPLICAS > 0)) && echo "replicas: $REPLICAS streaming, from 127.0.0.1:$REPLICA_PORT (DATABASE_REPLICA_URLS)"
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
    for dir in "$LAYOUT"/replica*/; do
      [[ -d "$dir" ]] && $PY scripts/replica_postgres.py stop "$dir"
    done
    $PY scripts/remote_postgres.py stop "$LAYOUT/postgres"
    ;;
  *)
    sed -n '2,17p' "$0" >&2
    exit 2
    ;;
esac
