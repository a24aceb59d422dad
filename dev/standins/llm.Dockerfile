# Stand-in for ghcr.io/ggml-org/llama.cpp:server(-cuda): Debian's CPU llama.cpp (llama.cpp-tools,
# already in the base) with llama-server as the entrypoint and curl for the healthcheck, like
# the official image. Built only for the compose tests (no registry is reachable here).
ARG BASE
FROM ${BASE}
RUN apt-get -q -o Acquire::Check-Valid-Until=false update \
 && apt-get install -y -q --no-install-recommends curl \
 && rm -rf /var/lib/apt/lists/*
ENV LLAMA_ARG_HOST=0.0.0.0
ENTRYPOINT ["/usr/bin/llama-server"]
