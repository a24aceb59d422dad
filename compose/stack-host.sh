# shellcheck shell=bash
# Sourced by ./stack: what `up` would otherwise only find out half-way. Each failure says what
# to install or change. Without a reachable Docker engine they fail, saying why (no permission
# on its socket, or not running): `check` has validated the files by then, and
# `./stack config --quiet` validates the files alone.
#
# Needs from ./stack: env_value, files, built_services, COMPOSE_ARGV (compose_argv), die, ENV_FILE;
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
  local name=$1 port=$2 bind=$3 service=$4 own hint
  [[ -n "$port" ]] || return 0
  own="$("$(docker_bin)" ps --filter label=com.docker.compose.project=voice-stack \
    --filter "label=com.docker.compose.service=$service" --format '{{.ID}}' 2>/dev/null || true)"
  [[ -z "$own" ]] || return 0
  listening "$port" "${bind:-0.0.0.0}" || return 0
  hint="stop it or change $name in $ENV_FILE"
  if [[ "$port" == 11434 ]]; then  # the old stack's port, and Ollama's
    hint="11434 is Ollama's default port: stop Ollama ('sudo systemctl disable --now ollama'),"
    hint+=" or set LLM_PROXY_PORT in $ENV_FILE to a free port and point the proxy's clients at it"
  fi
  fail_host "port $port ($name) is in use by another program: $hint"
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

# Every host port the selected services publish, as Compose resolves them (override files
# included; 0 or none: Docker picks a free one).
check_ports() {
  local service target published bind
  while read -r service target published bind; do
    [[ "$published" =~ ^[1-9][0-9]*$ ]] || continue
    check_port "$(port_setting "$service" "$target")" "$published" "$bind" "$service"
  done < <(published_ports)
}

# "service target published host_ip" per published port, from `config`'s long syntax.
published_ports() {
  "${COMPOSE_ARGV[@]}" config 2>/dev/null | awk '
    function flush() {
      if (item["target"] != "") print service, item["target"], item["published"], item["host_ip"]
      split("", item)
    }
    /^[^ ]/ { flush(); top = $1; next }
    top != "services:" { next }
    /^  [^ ]/ { flush(); service = $1; sub(/:$/, "", service); in_ports = 0; next }
    /^    [^ ]/ { flush(); in_ports = ($1 == "ports:"); next }
    in_ports && /^      - / { flush(); sub(/^      - /, "        ") }
    in_ports && /^        [a-z_]+: / {
      key = $1; sub(/:$/, "", key); value = $2; gsub(/"/, "", value); item[key] = value
    }
    END { flush() }'
}

# The .env setting of a service's published port (compose.yaml's ports).
port_setting() {
  case "$1:$2" in
    llm-auth:11434) echo LLM_PROXY_PORT ;;
    asr:8000) echo ASR_PORT ;;
    tts:8880) echo TTS_PORT ;;
    gateway:10300) echo GATEWAY_PORT ;;
    gateway:10301) echo GATEWAY_HTTP_PORT ;;
    *) echo "$1's port $2" ;;
  esac
}

# Probed once per run. Without an engine every host and image check would be skipped and a host
# that cannot run the stack would pass: stop, saying why Docker does not answer.
engine_reachable() {
  [[ -z "${ENGINE_VERSION:-}" ]] || return 0
  local out
  out="$("$(docker_bin)" version --format '{{.Server.Version}}' 2>&1)" ||
    die "$(engine_problem "${out//$'\n'/ }"); ./stack config --quiet validates the files alone"
  ENGINE_VERSION="${out##*$'\n'}"
}

# What to do when `docker version` cannot reach the engine, from the docker CLI's own words.
engine_problem() {
  case "${1,,}" in
    *"permission denied"*)
      echo "no permission to reach the Docker engine ($1): add yourself to the docker group," \
        "'sudo usermod -aG docker \$USER', then log out and in again" ;;
    *"cannot connect to the docker daemon"* | *"is the docker daemon running"*)
      echo "the Docker engine is not running ($1): start it, 'sudo systemctl start docker'" \
        "('sudo systemctl enable docker' starts it at every boot)" ;;
    *"command not found"* | *"no such file"*)
      echo "no '$(docker_bin)' command: install Docker Engine (docs.docker.com/engine/install)" ;;
    *) echo "no Docker engine answers '$(docker_bin) version' ($1): is it running, and do" \
        "DOCKER_HOST or 'docker context' point at it?" ;;
  esac
}

check_host() {
  engine_reachable
  local services
  services="$(selected_services | tr '\n' ' ')"
  HOST_FAILED=0
  check_engine "$ENGINE_VERSION"
  check_compose
  check_buildx
  check_gpu "$services"
  check_ports
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
  engine_reachable
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
      missing+=("$image ($svc: check the tag, or set $(image_setting "$svc"); ./stack variants lists the ones that fit)")
    [[ -z "$image" || "$image" == *@sha256:* ]] || note_tag_only "$svc" "$image"
  done
  ((${#missing[@]} == 0)) || {
    printf 'stack: image not found on this host or in its registry: %s\n' "${missing[@]}" >&2
    die "nothing was pulled, stopped or recreated"
  }
  echo "stack: every image exists" >&2
}

# The .env setting that overrides SERVICE's image (llm-auth: LLM_AUTH_IMAGE).
image_setting() { local key=${1^^}; echo "${key//-/_}_IMAGE"; }

# A tag can be moved in its registry (stack-gpu.sh's VARIANTS says which defaults are by tag).
note_tag_only() {
  echo "stack: note: $2 ($1) is pinned by tag only, not by digest: 'docker buildx imagetools" \
    "inspect $2' prints its digest, to pin as $(image_setting "$1")=$2@sha256:<digest>" >&2
}

# llama-server's own --help in the image about to run: a flag it does not know (an older build
# than the one the compose file was written for, or a typo in LLM_EXTRA_ARGS) stops here, not in
# a crash loop after `up`. `check` reads it when the image is on this host; `up` pulls it first.
check_llm_flags() {
  engine_reachable
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
