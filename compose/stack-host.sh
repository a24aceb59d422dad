# shellcheck shell=bash
# Sourced by ./stack: what `up` would otherwise only find out half-way. Each failure says what
# to install or change. Without a reachable Docker engine (validating on a laptop, say) the
# checks are skipped with a note, and `check` still validates the files.
#
# Needs from ./stack: env_value, files, COMPOSE_ARGV (compose_argv), die.

MIN_ENGINE=25.0.0    # healthcheck start_interval
MIN_COMPOSE=2.24.4   # depends_on required:false, start_interval, !reset / !override
MIN_BUILDX=0.17.0    # recent Compose refuses to build with an older buildx
GPU_SERVICES="llm asr tts"

docker_bin() { printf '%s' "${DOCKER_BIN:-docker}"; }

# version_ge A B: A >= B for dotted versions (a leading "v" and any suffix after "-" ignored).
version_ge() {
  local a=${1#v} b=${2#v} i x y
  a=${a%%-*} b=${b%%-*}
  IFS=. read -r -a xs <<<"$a"
  IFS=. read -r -a ys <<<"$b"
  for i in 0 1 2; do
    x=${xs[i]:-0} y=${ys[i]:-0}
    x=${x//[!0-9]/} y=${y//[!0-9]/}
    ((10#${x:-0} > 10#${y:-0})) && return 0
    ((10#${x:-0} < 10#${y:-0})) && return 1
  done
  return 0
}

engine_version() { "$(docker_bin)" version --format '{{.Server.Version}}' 2>/dev/null; }

selected_services() { "${COMPOSE_ARGV[@]}" config --services; }

fail_host() { echo "stack check: $*" >&2; HOST_FAILED=1; }

check_engine() {
  local version=$1
  version_ge "$version" "$MIN_ENGINE" ||
    fail_host "Docker Engine $version is older than $MIN_ENGINE (healthcheck start_interval):" \
      "upgrade Docker Engine (docs.docker.com/engine/install)"
}

check_compose() {
  local version
  version="$("${COMPOSE_ARGV[@]}" version --short 2>/dev/null || true)"
  if [[ -z "$version" ]]; then
    fail_host "no Docker Compose v2 ('${COMPOSE_BIN:-docker compose} version' failed):" \
      "install the docker-compose-plugin package"
  elif ! version_ge "$version" "$MIN_COMPOSE"; then
    fail_host "Docker Compose $version is older than $MIN_COMPOSE: upgrade docker-compose-plugin"
  fi
}

# Only when something is built here (a *_BUILD_CONTEXT is set).
check_buildx() {
  (($(files | grep -c '^/') > 1)) || return 0
  local version
  version="$("$(docker_bin)" buildx version 2>/dev/null | awk '{print $2}' || true)"
  version="${version#v}"
  if [[ -z "$version" ]]; then
    fail_host "a *_BUILD_CONTEXT is set but docker buildx is missing:" \
      "install docker-buildx-plugin $MIN_BUILDX or newer"
  elif ! version_ge "$version" "$MIN_BUILDX"; then
    fail_host "docker buildx $version is older than $MIN_BUILDX (Compose refuses to build with it):" \
      "upgrade docker-buildx-plugin"
  fi
}

check_gpu() {
  local services=$1 svc wants=""
  for svc in $GPU_SERVICES; do [[ " $services " == *" $svc "* ]] && wants+=" $svc"; done
  [[ -n "$wants" && -z "${VOICE_STACK_SKIP_GPU_CHECK:-}" ]] || return 0
  local runtimes
  runtimes="$("$(docker_bin)" info --format '{{json .Runtimes}}' 2>/dev/null || true)"
  [[ "$runtimes" == *'"nvidia"'* ]] ||
    fail_host "the GPU services (${wants# }) need the NVIDIA runtime, which Docker does not list:" \
      "install the NVIDIA Container Toolkit, then run" \
      "'sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker'" \
      "(VOICE_STACK_SKIP_GPU_CHECK=1 skips this check, e.g. for CDI-only setups)"
}

# A published port another program already listens on (this project's own containers aside).
check_port() {
  local name=$1 port=$2 bind=$3 own
  [[ -n "$port" ]] || return 0
  own="$("$(docker_bin)" ps --filter label=com.docker.compose.project=voice-stack \
    --format '{{.Ports}}' 2>/dev/null || true)"
  [[ "$own" == *":$port->"* ]] && return 0
  if listening "$port" "${bind:-0.0.0.0}"; then
    fail_host "port $port ($name) is in use by another program: stop it or change $name"
  fi
}

# Something listens on the port (ss sees every address; without it, try a connection).
listening() {
  local port=$1 bind=$2
  if command -v ss >/dev/null; then
    [[ -n "$(ss -Hltn "( sport = :$port )" 2>/dev/null)" ]]
  else
    (exec 3<>"/dev/tcp/${bind/0.0.0.0/127.0.0.1}/$port") 2>/dev/null
  fi
}

check_ports() {
  local services=$1
  check_port LLM_PROXY_PORT "$(env_value LLM_PROXY_PORT)" "$(env_value LLM_PROXY_BIND)"
  [[ " $services " == *" gateway "* ]] || return 0
  check_port GATEWAY_PORT "$(env_value GATEWAY_PORT)" "$(env_value GATEWAY_BIND)"
  check_port GATEWAY_HTTP_PORT "$(env_value GATEWAY_HTTP_PORT)" "$(env_value GATEWAY_HTTP_BIND)"
}

# Probed once per run; the note is printed once too.
engine_reachable() {
  if [[ -z "${ENGINE_PROBED:-}" ]]; then
    ENGINE_PROBED=1
    ENGINE_VERSION="$(engine_version || true)"
    [[ -n "$ENGINE_VERSION" ]] ||
      echo "stack: no Docker engine answers '$(docker_bin) version': host and image checks skipped" >&2
  fi
  [[ -n "$ENGINE_VERSION" ]]
}

check_host() {
  engine_reachable || return 0
  local services
  services="$(selected_services | tr '\n' ' ')"
  HOST_FAILED=0
  check_engine "$ENGINE_VERSION"
  check_compose
  check_buildx
  check_gpu "$services"
  check_ports "$services"
  ((HOST_FAILED == 0)) || die "this host is not ready for ./stack up (see above)"
}

# docker manifest inspect on every image the selected profiles pull (built ones aside), before
# anything is pulled: a tag that was never published fails here, not half-way through `up`.
check_images() {
  engine_reachable || return 0
  local image missing=()
  while read -r image; do
    [[ -n "$image" && "$image" != *:local ]] || continue
    if ! "$(docker_bin)" manifest inspect "$image" >/dev/null 2>&1; then missing+=("$image"); fi
  done < <("${COMPOSE_ARGV[@]}" config --images)
  ((${#missing[@]} == 0)) ||
    die "not found in their registries (check the tag, or your access to it): ${missing[*]}"
  echo "stack: every image exists" >&2
}
