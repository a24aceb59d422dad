# shellcheck shell=bash
# Sourced by ./stack: what `up` would otherwise only find out half-way. Each failure says what
# to install or change. Without a reachable Docker engine (validating on a laptop, say) the
# checks are skipped with a note, and `check` still validates the files.
#
# Needs from ./stack: env_value, files, built_services, COMPOSE_ARGV (compose_argv), die;
# from stack-gpu.sh: check_gpu_fit.

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

# Before `./stack check` asks Compose to read the files: a missing or old Compose says what to
# install, not a raw "unknown command" or a parse error of a newer file format.
check_compose_first() {
  HOST_FAILED=0
  check_compose
  ((HOST_FAILED == 0)) || die "this host is not ready for ./stack up (see above)"
}

# Only when something is built here (the gateway by default, or a *_BUILD_CONTEXT is set).
check_buildx() {
  [[ -n "$(built_services)" ]] || return 0
  local version
  version="$("$(docker_bin)" buildx version 2>/dev/null | awk '{print $2}' || true)"
  version="${version#v}"
  if [[ -z "$version" ]]; then
    fail_host "$(built_services | tr "\n" " ")is built here but docker buildx is missing:" \
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
  [[ "$(env_value STACK_DEVICE)" != cpu ]] || return 0
  local runtimes
  runtimes="$("$(docker_bin)" info --format '{{json .Runtimes}}' 2>/dev/null || true)"
  [[ "$runtimes" == *'"nvidia"'* ]] ||
    fail_host "the GPU services (${wants# }) need the NVIDIA runtime, which Docker does not list:" \
      "install the NVIDIA Container Toolkit, then run" \
      "'sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker'" \
      "(VOICE_STACK_SKIP_GPU_CHECK=1 skips this check, e.g. for CDI-only setups)"
  check_gpu_fit "$services"
}

# A published port another program already listens on. The service's own running container
# holds it after `up` (with host networking `docker ps` shows no published ports, so the
# container is asked for by its compose labels, not by its ports).
check_port() {
  local name=$1 port=$2 bind=$3 service=$4 own
  [[ -n "$port" ]] || return 0
  own="$("$(docker_bin)" ps --filter label=com.docker.compose.project=voice-stack \
    --filter "label=com.docker.compose.service=$service" --format '{{.ID}}' 2>/dev/null || true)"
  [[ -z "$own" ]] || return 0
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
  check_port LLM_PROXY_PORT "$(env_value LLM_PROXY_PORT)" "$(env_value LLM_PROXY_BIND)" llm-auth
  [[ " $services " == *" gateway "* ]] || return 0
  check_port GATEWAY_PORT "$(env_value GATEWAY_PORT)" "$(env_value GATEWAY_BIND)" gateway
  check_port GATEWAY_HTTP_PORT "$(env_value GATEWAY_HTTP_PORT)" "$(env_value GATEWAY_HTTP_BIND)" \
    gateway
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

# The image SERVICE runs, as Compose resolves it (`config --images SERVICE` would list the
# images of the services it depends on too).
service_image() {
  "${COMPOSE_ARGV[@]}" config "$1" 2>/dev/null | awk -v svc="  $1:" '
    $0 == svc { inside = 1; next }
    inside && /^  [^ ]/ { inside = 0 }
    inside && /^    image: / { sub(/^    image: /, ""); gsub(/"/, ""); print; exit }'
}

# SERVICE is built on this host rather than pulled.
built_here() { [[ " $(built_services | tr '\n' ' ') " == *" $1 "* ]]; }

# On this host already (compose pulls only what is missing), or in its registry.
image_available() {
  "$(docker_bin)" image inspect "$1" >/dev/null 2>&1 ||
    "$(docker_bin)" manifest inspect "$1" >/dev/null 2>&1
}

# The base images a service built here starts FROM (build stages and ARG-made names aside).
build_bases() {
  local svc=$1 context dockerfile default=Dockerfile
  if [[ "$svc" == gateway ]]; then context="$(env_value GATEWAY_BUILD_CONTEXT)"; context="${context:-../gateway}"
  else context="$(env_value "${svc^^}_BUILD_CONTEXT")"; fi
  [[ "$svc" != llm ]] || default=.devops/cuda.Dockerfile
  dockerfile="$(env_value "${svc^^}_DOCKERFILE")"; dockerfile="${dockerfile:-$default}"
  [[ "$context" == /* ]] || context="$HERE/$context"
  [[ -f "$context/$dockerfile" ]] ||
    die "$svc is built here, but there is no $context/$dockerfile"
  awk 'toupper($1) == "FROM" {
         i = 2; while ($i ~ /^--/) i++
         image = $i; if (toupper($(i + 1)) == "AS") stage[tolower($(i + 2))] = 1
         if (!(tolower(image) in stage) && image != "scratch" && image !~ /\$/ && !seen[image]++) print image
       }' "$context/$dockerfile"
}

# Every image `up` is about to use, before anything is pulled, stopped or recreated: the pulled
# ones (on this host or in their registry) and the bases of the ones built here.
check_images() {
  engine_reachable || return 0
  local svc image missing=()
  for svc in $(selected_services); do
    if built_here "$svc"; then
      for image in $(build_bases "$svc"); do
        image_available "$image" ||
          missing+=("$image (the base that $svc is built from, here)")
      done
      continue
    fi
    image="$(service_image "$svc")"
    [[ -z "$image" ]] || image_available "$image" ||
      missing+=("$image ($svc: check the tag, or set ${svc^^}_IMAGE; ./stack variants lists the ones that fit)")
  done
  ((${#missing[@]} == 0)) || {
    printf 'stack: image not found on this host or in its registry: %s\n' "${missing[@]}" >&2
    die "nothing was pulled, stopped or recreated"
  }
  echo "stack: every image exists" >&2
}

# llama-server's own --help in the image about to run: a flag it does not know (an older build
# than the one the compose file was written for, or a typo in LLM_EXTRA_ARGS) stops here, not in
# a crash loop after `up`. `check` reads it when the image is on this host; `up` pulls it first.
check_llm_flags() {
  engine_reachable || return 0
  [[ " $(selected_services | tr '\n' ' ') " == *" llm "* ]] || return 0
  local image help flag unknown=() gpus=()
  image="$(service_image llm)"
  if ! "$(docker_bin)" image inspect "$image" >/dev/null 2>&1; then
    if [[ "${1:-}" != pull ]] || built_here llm; then
      echo "stack: $image is not on this host yet: its flags are checked once it is (./stack up pulls it first)" >&2
      return 0
    fi
    "$(docker_bin)" pull -q "$image" >/dev/null || die "could not pull $image"
  fi
  [[ "$(env_value STACK_DEVICE)" == cpu || -n "${VOICE_STACK_SKIP_GPU_CHECK:-}" ]] || gpus=(--gpus all)
  help="$("$(docker_bin)" run --rm --network none "${gpus[@]}" "$image" --help 2>&1 || true)"
  if [[ "$help" != *--port* ]]; then
    echo "stack: could not read llama-server --help from $image: its flags are not checked" >&2
    return 0
  fi
  for flag in $("${COMPOSE_ARGV[@]}" config llm 2>/dev/null | awk '
      /^    command:/ { in_command = 1; next }
      in_command && /^      - / { sub(/^      - /, ""); if ($0 ~ /^--?[a-z][a-z0-9-]*$/) print; next }
      { in_command = 0 }' | sort -u); do
    grep -qE -- "(^|[ ,])$flag([ ,=]|$)" <<<"$help" || unknown+=("$flag")
  done
  ((${#unknown[@]} == 0)) || die "llama-server in $image does not know ${unknown[*]}:" \
    "pin a newer LLM_IMAGE (./stack variants), or drop the flag from LLM_EXTRA_ARGS"
  echo "stack: llama-server in $image knows every flag" >&2
}
