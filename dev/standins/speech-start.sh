#!/bin/sh
# Starts the stand-in speech server whatever the arguments (speaches' image runs
# `uvicorn --factory speaches.main:create_app`), on the address the image it stands in for reads.
set -eu
host="${UVICORN_HOST:-${HOST:-0.0.0.0}}"
port="${UVICORN_PORT:-${PORT:-8000}}"
exec python -m voice_stack_dev.speech_server --host "$host" --port "$port" --cpu-threads 1
