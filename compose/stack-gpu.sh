# shellcheck shell=bash
# Sourced by ./stack: which image variant runs on which NVIDIA driver and GPU, in one place
# (docs/deploy.md carries the same tables). `./stack init` picks the variants that fit the host
# it runs on; `./stack check` refuses a driver or a card an image cannot run on.
#
# Needs from ./stack: env_value, die, ENV_FILE; from stack-host.sh: version_ge, fail_host,
# service_image, GPU_SERVICES.

# The variants ./stack init chooses from, in order of preference per service:
#   service|variant|image|what it is
# Two are pinned by tag only, llama.cpp's CPU server-b11347 and Kokoro's v0.9.0-cu128: no public
# record of their digests was found and no registry is reachable where these pins were written.
# `./stack check` says so for every tag-only image; pin them by digest once one is read.
VARIANTS=(
  "llm|cuda12.8|ghcr.io/ggml-org/llama.cpp:server-cuda-b11347@sha256:d87b02aafa74797a2d599b281c50468704bd0bcdc57bfcf31b570d593f1d285b|llama.cpp b11347, CUDA 12.8"
  "llm|cpu|ghcr.io/ggml-org/llama.cpp:server-b11347|llama.cpp b11347, CPU"
  "asr|cuda12.9|ghcr.io/speaches-ai/speaches:0.9.0-rc.3-cuda@sha256:f4eb14d1c53b19c5bd1f76d10ea9fc10288ceaf82dca09506d3f0ef92ee943de|speaches 0.9.0-rc.3, CUDA 12.9"
  "asr|cuda12.6|ghcr.io/speaches-ai/speaches:0.9.0-rc.3-cuda-12.6.3@sha256:5c6206a349e90b9a6782342917e72f84fc7cb60e8afd540f6aa625831ac1fd0f|speaches 0.9.0-rc.3, CUDA 12.6"
  "asr|cpu|ghcr.io/speaches-ai/speaches:0.9.0-rc.3-cpu@sha256:2163775b6df5e451a71200e8f675fed68dbd8ab184fc604453d549e486f22fd2|speaches 0.9.0-rc.3, CPU"
  "tts|cu126|ghcr.io/remsky/kokoro-fastapi-gpu:v0.9.0@sha256:9ba150465c6b8f5d6b1c62b54de83eb9aa0a1444aad8a1a9c8948eed60564b76|Kokoro-FastAPI v0.9.0, CUDA 12.6"
  "tts|cu128|ghcr.io/remsky/kokoro-fastapi-gpu:v0.9.0-cu128|Kokoro-FastAPI v0.9.0, CUDA 12.8"
  "tts|cpu|ghcr.io/remsky/kokoro-fastapi-cpu:v0.9.0@sha256:7f9a256919eff7a84e9a77b757de0f3fe95c48fcf4fbe1e008deacbc7d9f2985|Kokoro-FastAPI v0.9.0, CPU"
)

# What a GPU image needs, by the start of its reference (first match wins):
#   prefix|CUDA|min driver on GeForce/TITAN|min driver on other cards|GPU code (SASS)|PTX from
# The driver minimums are what the image's NVIDIA_REQUIRE_CUDA lets the container toolkit
# start: CUDA 12.x images also allow the datacenter branches from 535 on cards that are not
# GeForce or TITAN; CUDA 13 needs 580 everywhere. SASS for compute capability X.Y runs on X.Z
# with Z >= Y; PTX from P is compiled by the driver for any card >= P. Empty = not known, not
# checked (speaches' CTranslate2 does not publish its GPU code list).
NEEDS=(
  "ghcr.io/ggml-org/llama.cpp:server-cuda13-|13.0|580|580|8.6 8.9 12.0 12.1|7.5"
  "ghcr.io/ggml-org/llama.cpp:server-cuda|12.8|570|535|8.6 8.9 12.0|5.0"
  "ghcr.io/speaches-ai/speaches:0.9.0-rc.3-cuda-12.6.3|12.6|560|535||"
  "ghcr.io/speaches-ai/speaches:0.9.0-rc.3-cuda-12.4.1|12.4|550|535||"
  "ghcr.io/speaches-ai/speaches:0.9.0-rc.3-cuda|12.9|575|535||"
  "ghcr.io/remsky/kokoro-fastapi-gpu:v0.9.0-cu128|12.8|570|535|7.0 7.5 8.0 8.6 9.0 10.0 12.0|"
  "ghcr.io/remsky/kokoro-fastapi-gpu:|12.6|560|535|5.0 6.0 7.0 7.5 8.0 8.6 9.0|"
)

# How to switch an existing .env to the CPU (./stack init refuses once .env exists).
CPU_LINES="./stack variants --cpu prints the lines to put in .env: STACK_DEVICE=cpu, the CPU images"

# needs_of IMAGE: the NEEDS row of an image, empty for a CPU or unknown image.
needs_of() {
  local image=$1 row
  for row in "${NEEDS[@]}"; do
    [[ "$image" == "${row%%|*}"* ]] && { printf '%s' "$row"; return; }
  done
}

# Sets GPUS to the host's GPUs, one "name|driver|compute capability" line each (nvidia-smi
# prints "NVIDIA GeForce RTX 4090, 570.86.15, 8.9" per card), empty without nvidia-smi; and
# GPU_ERROR to what nvidia-smi said when it is there but fails: a driver that does not answer
# (a kernel update it was not rebuilt for) is not "no GPU", and must not pick the CPU images.
read_gpus() {
  local out status=0
  GPUS="" GPU_ERROR=""
  command -v nvidia-smi >/dev/null || return 0
  out="$(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1)" ||
    status=$?
  if ((status != 0)); then
    GPU_ERROR="${out:-no output}"
    GPU_ERROR="'nvidia-smi' fails (exit $status: ${GPU_ERROR//$'\n'/ }): the NVIDIA driver does not"
    GPU_ERROR+=" answer, most often after a kernel update it was not rebuilt for; reinstall or"
    GPU_ERROR+=" rebuild it for the running kernel ($(uname -r); e.g. 'sudo dkms autoinstall'),"
    GPU_ERROR+=" then reboot"
    return 0
  fi
  GPUS="$(sed -n 's/^ *\([^,]*[^ ,]\) *, *\([0-9.]*\) *, *\([0-9.]*\) *$/\1|\2|\3/p' <<<"$out")"
}

# The GPU lines alone (empty without a GPU or with a failing driver).
host_gpus() { read_gpus; printf '%s' "$GPUS"; }

# cap_ge A B: compute capability A >= B (major.minor).
cap_ge() {
  local a_major=${1%%.*} a_minor=${1#*.} b_major=${2%%.*} b_minor=${2#*.}
  ((a_major > b_major || (a_major == b_major && a_minor >= b_minor)))
}

# has_kernels CAP "SASS" PTX: the image carries code a card of this capability runs.
has_kernels() {
  local cap=$1 sass=$2 ptx=$3 arch
  [[ -z "$sass" && -z "$ptx" ]] && return 0  # not known: not checked
  for arch in $sass; do
    [[ "${arch%%.*}" == "${cap%%.*}" ]] && cap_ge "$cap" "$arch" && return 0
  done
  [[ -n "$ptx" ]] && cap_ge "$cap" "$ptx"
}

# misfit IMAGE GPU_LINE: why this image cannot run on this GPU (nothing when it can).
misfit() {
  local image=$1 name driver cap row cuda geforce other sass ptx minimum
  IFS='|' read -r name driver cap <<<"$2"
  row="$(needs_of "$image")"
  [[ -n "$row" ]] || return 0
  IFS='|' read -r _ cuda geforce other sass ptx <<<"$row"
  minimum=$other
  [[ "$name" == *GeForce* || "$name" == *TITAN* ]] && minimum=$geforce
  if ! version_ge "$driver" "$minimum"; then
    echo "driver $driver on $name is older than $minimum, which a CUDA $cuda image needs there"
  elif [[ -n "$cap" ]] && ! has_kernels "$cap" "$sass" "$ptx"; then
    echo "it has no GPU code for $name (compute capability $cap; it has ${sass// /, }${ptx:+, and PTX from $ptx})"
  fi
}

# fits IMAGE: runs on every GPU of this host (a reason on stdout and status 1 when not).
fits() {
  local image=$1 gpu why
  while read -r gpu; do
    [[ -n "$gpu" ]] || continue
    why="$(misfit "$image" "$gpu")"
    [[ -z "$why" ]] || { printf '%s' "$why"; return 1; }
  done <<<"$GPUS"
}

# ./stack check: every selected GPU service's image against every GPU of this host.
check_gpu_fit() {
  local services=$1 svc image why
  [[ "$(env_value STACK_DEVICE)" != cpu ]] || return 0
  read_gpus
  if [[ -n "$GPU_ERROR" ]]; then
    fail_host "$GPU_ERROR; or run on the CPU: $CPU_LINES"
    return
  elif [[ -z "$GPUS" ]]; then
    fail_host "no NVIDIA GPU answers 'nvidia-smi' on this host: install the NVIDIA driver," \
      "or run on the CPU: $CPU_LINES"
    return
  fi
  for svc in $GPU_SERVICES; do
    [[ " $services " == *" $svc "* ]] || continue
    image="$(service_image "$svc")"
    why="$(fits "$image")" ||
      fail_host "$svc: $image cannot run here: $why; ./stack variants prints the lines that fit" \
        "this host: put its ${svc^^}_IMAGE line (and STACK_DEVICE) in $ENV_FILE"
  done
}

# The variant of SERVICE for this host: the first one (in VARIANTS order) that fits every GPU.
# Prints "image|what it is|why the ones before were passed over".
choose_variant() {
  local service=$1 device=$2 row svc variant image what why passed=""
  for row in "${VARIANTS[@]}"; do
    IFS='|' read -r svc variant image what <<<"$row"
    [[ "$svc" == "$service" ]] || continue
    if [[ "$device" == cpu ]]; then
      [[ "$variant" == cpu ]] && { printf '%s|%s|%s' "$image" "$what" ""; return; }
      continue
    fi
    [[ "$variant" != cpu ]] || continue
    if why="$(fits "$image")"; then
      printf '%s|%s|%s' "$image" "$what" "$passed"
      return
    fi
    passed+="${passed:+; }not $what: $why"
  done
  printf '||%s' "$passed"
  return 1
}

# ./stack init: the image lines for this host (or the CPU, with --cpu or without a GPU), each
# choice said on stderr with its reason. Prints KEY=VALUE lines for .env.
pick_images() {
  local device=$1 service key choice image what why failed=0
  GPUS=""
  if [[ "$device" != cpu ]]; then
    read_gpus
    [[ -z "$GPU_ERROR" ]] ||
      die "$GPU_ERROR. To choose the CPU images deliberately: ./stack init --cpu (with a .env" \
        "already, $CPU_LINES)"
    if [[ -z "$GPUS" ]]; then
      echo "stack init: no NVIDIA GPU answers 'nvidia-smi': choosing the CPU images" >&2
      device=cpu
    else
      while IFS='|' read -r name driver cap; do
        echo "stack init: found $name (driver $driver, compute capability $cap)" >&2
      done <<<"$GPUS"
    fi
  fi
  echo "STACK_DEVICE=$([[ "$device" == cpu ]] && echo cpu || echo cuda)"
  for service in llm asr tts; do
    key="${service^^}_IMAGE"
    if choice="$(choose_variant "$service" "$device")"; then
      IFS='|' read -r image what why <<<"$choice"
      echo "stack init: $service: $what${why:+ ($why)}" >&2
      echo "$key=$image"
    else
      IFS='|' read -r _ _ why <<<"$choice"
      echo "stack init: $service: no image fits this host: $why" >&2
      failed=1
    fi
  done
  ((failed == 0)) || die "no image variant fits this host: update the NVIDIA driver, or use the" \
    "CPU images (./stack init --cpu; with a .env already, $CPU_LINES)"
}

# What ./stack init writes into .env and ./stack variants prints: the variants that fit this
# host, and on the CPU the settings docs/deploy.md recommends there (.env.example's are a GPU's:
# Whisper large-v3, every layer offloaded).
host_lines() {
  local lines
  lines="$(pick_images "$1")" || exit 2
  printf '%s\n' "$lines"
  [[ "$lines" != *STACK_DEVICE=cpu* ]] || cpu_settings
}

# A small Whisper, no layer offloaded, and every core but one for llama-server.
cpu_settings() {
  local cores
  cores="$(nproc 2>/dev/null || echo 2)"
  printf '%s\n' LLM_GPU_LAYERS=0 ASR_MODEL=Systran/faster-whisper-small.en \
    "LLM_EXTRA_ARGS=\"-t $((cores > 1 ? cores - 1 : 1))\""
  echo "stack init: cpu: no layer on a GPU, Whisper small.en, llama-server on all cores but one" \
    "(docs/deploy.md, Without a GPU)" >&2
}
