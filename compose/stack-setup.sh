# shellcheck shell=bash
# Sourced by ./stack: what a user needs around .env. `./stack connect` (and the end of `./stack
# init`) prints what Home Assistant asks for, `./stack key` prints one key again, and
# `./stack upgrade` brings an existing .env up to this checkout after a `git pull`.
#
# Needs from ./stack: env_value, keygen, die, ENV_FILE, HERE, KEYS; from stack-gpu.sh:
# pick_images, VARIANTS.

# Every *_IMAGE default an earlier checkout shipped (`git log -p compose/.env.example
# compose/stack-gpu.sh`) and that neither .env.example nor VARIANTS holds any more: ./stack
# upgrade replaces these, and keeps any other pin as the user's own. tests/compose/
# test_stack_setup.py checks the list against the history.
FORMER_PINS=(
  ghcr.io/ggml-org/llama.cpp:server-cuda-b11669
  nginx:1.30-alpine
  ghcr.io/speaches-ai/speaches:0.9.0-rc.3-cuda
  ghcr.io/remsky/kokoro-fastapi-gpu:v0.8.0
  ghcr.io/voice-stack/voice-stack-gateway:0.1.0
)

# ---------------------------------------------------------------------------------------------
# ./stack connect

# This host's address on the LAN: VOICE_STACK_HOST, else the source address of the route to
# the internet (a route lookup: nothing is sent), else the first of `hostname -I`.
lan_address() {
  local address
  if [[ -n "${VOICE_STACK_HOST:-}" ]]; then printf '%s' "$VOICE_STACK_HOST"; return; fi
  address="$(ip -4 route get 1.1.1.1 2>/dev/null |
    awk '{ for (i = 1; i < NF; i++) if ($i == "src") { print $(i + 1); exit } }' || true)"
  [[ -n "$address" ]] || address="$(hostname -I 2>/dev/null | awk '{ print $1 }' || true)"
  printf '%s' "${address:-$NO_ADDRESS}"
}
NO_ADDRESS="<this host's address>"

# Where Home Assistant reaches a port published on BIND_SETTING's address.
reach_address() {
  local bind
  bind="$(env_value "$1")"
  case "${bind:-0.0.0.0}" in
    0.0.0.0 | :: | "[::]") lan_address ;;
    *) bind="${bind#[}"; printf '%s' "${bind%]}" ;;
  esac
}

url_host() { if [[ "$1" == *:* ]]; then printf '[%s]' "$1"; else printf '%s' "$1"; fi; }

# NAME's value, or DEFAULT when it is empty (as compose's ${NAME:-DEFAULT}).
setting() {
  local value
  value="$(env_value "$1")"
  printf '%s' "${value:-$2}"
}

# The steps left on this host, then what to enter in Home Assistant, with the labels of the
# Voice Stack integration's form (custom_components/voice_stack/translations/en.json) and of HA's
# Wyoming Protocol form. The agent key goes to stdout only, and only to a terminal: stdout
# redirected to a file (a log) gets the command that prints it instead.
connect_info() {
  [[ -f "$ENV_FILE" ]] || die "no $ENV_FILE: run ./stack init (or set VOICE_STACK_ENV_FILE)"
  local llm gateway health key profiles step=1 gateway_runs=0 notes=()
  llm="$(reach_address LLM_PROXY_BIND)"
  gateway="$(reach_address GATEWAY_BIND)"
  health="$(reach_address GATEWAY_HTTP_BIND)"
  profiles=",$(env_value COMPOSE_PROFILES),"
  [[ "$profiles" != *,gateway,* && "$profiles" != *,\*,* ]] || gateway_runs=1
  key="$(env_value LLM_AGENT_KEY)"
  if [[ -z "$key" ]]; then
    key="(LLM_AGENT_KEY is empty in $ENV_FILE: ./stack keygen prints one)"
  elif [[ ! -t 1 ]]; then
    key="(not shown: this output is not a terminal; ./stack key agent prints it)"
  fi
  echo "Next steps on this host (in $HERE):"
  if [[ -z "$(env_value LLM_MODELS_DIR)" || -z "$(env_value LLM_MODEL_FILE)" ]]; then
    echo "  $((step++)). set LLM_MODELS_DIR (the folder of your GGUF files) and LLM_MODEL_FILE in $ENV_FILE"
  fi
  echo "  $((step++)). ./stack check"
  echo "  $((step++)). ./stack up -d"
  echo
  echo "Then in Home Assistant, Settings > Devices & services > Add integration:"
  echo "  Voice Stack"
  echo "    URL:          http://$(url_host "$llm"):$(setting LLM_PROXY_PORT 11434)"
  echo "    Agent key:    $key"
  if ((gateway_runs)); then
    echo "    Gateway URL:  http://$(url_host "$health"):$(setting GATEWAY_HTTP_PORT 10301)"
    echo "  Wyoming Protocol"
    echo "    Host:         $gateway"
    echo "    Port:         $(setting GATEWAY_PORT 10300)"
    echo "  then Settings > Voice assistants > Add assistant: the gateway's speech-to-text and"
    echo "  text-to-speech, and the conversation agent Voice Stack conversation."
  else
    notes+=("the gateway does not run here (COMPOSE_PROFILES has no 'gateway'): leave Gateway URL empty")
  fi
  [[ "$(env_value LLM_PROXY_BIND)" != 127.* ]] ||
    notes+=("LLM_PROXY_BIND is $(env_value LLM_PROXY_BIND): only this host reaches the URL above")
  [[ "$llm$gateway$health" != *"$NO_ADDRESS"* ]] ||
    notes+=("this host's LAN address was not found: enter it in place of $NO_ADDRESS (VOICE_STACK_HOST=<address> ./stack connect prints it in)")
  ((${#notes[@]} == 0)) || printf '\nNote: %s\n' "${notes[@]}"
  echo
  echo "./stack connect prints this again; ./stack key agent prints only the agent key."
}

# ---------------------------------------------------------------------------------------------
# ./stack key agent|proxy|api

key_usage() {
  cat >&2 <<'EOF'
usage: ./stack key agent|proxy|api    print one key from .env (only the value, for a pipe)
  agent  LLM_AGENT_KEY, the Voice Stack integration's "Agent key"
  proxy  LLM_PROXY_KEY, the general key for Open WebUI, scripts and other LAN clients
  api    LLM_API_KEY, llama-server's own key (only the proxy holds it)
EOF
  exit 2
}

print_key() {
  local name value
  (($# == 1)) || key_usage
  case "$1" in
    agent) name=LLM_AGENT_KEY ;;
    proxy) name=LLM_PROXY_KEY ;;
    api) name=LLM_API_KEY ;;
    *) key_usage ;;
  esac
  [[ -f "$ENV_FILE" ]] || die "no $ENV_FILE: run ./stack init (or set VOICE_STACK_ENV_FILE)"
  value="$(env_value "$name")"
  [[ -n "$value" ]] || die "$name is not set in $ENV_FILE (./stack keygen prints a fresh one)"
  printf '%s\n' "$value"
}

# ---------------------------------------------------------------------------------------------
# ./stack upgrade [--apply]

say() { echo "stack upgrade: $*" >&2; }

# What to do with a key that ./stack upgrade had to generate (a .env older than that key).
declare -A NEW_KEY_USE=(
  [LLM_AGENT_KEY]="enter it in Home Assistant (Voice Stack, Reconfigure, Agent key; docs/deploy.md, Migrating from one key): ./stack key agent prints it"
  [LLM_PROXY_KEY]="give it to Open WebUI and your other clients: ./stack key proxy prints it"
  [LLM_API_KEY]="only the proxy uses it"
)

shown() { printf '%s' "${1:-(empty)}"; }

# NAME's value in .env itself (the shell's variables are what a run overrides, not the file).
file_value() { (unset "$1"; env_value "$1"); }

# The names .env sets, in order, once each.
env_names() {
  sed -nE 's/^[[:space:]]*(export[[:space:]]+)?([A-Za-z_][A-Za-z0-9_]*)=.*/\2/p' "$ENV_FILE" |
    awk '!seen[$0]++'
}

file_mode() { stat -c %a "$1" 2>/dev/null || stat -f %Lp "$1"; }

# .env with each NAME=VALUE line of $1 put in place of NAME's line (an `export ` kept).
replace_lines() {
  REPLACE="$1" awk '
    BEGIN {
      n = split(ENVIRON["REPLACE"], lines, "\n")
      for (i = 1; i <= n; i++) if (lines[i] != "") {
        key = lines[i]; sub(/=.*/, "", key); value = lines[i]; sub(/^[^=]*=/, "", value)
        over[key] = value
      }
    }
    match($0, /^[ \t]*(export[ \t]+)?[A-Za-z_][A-Za-z0-9_]*=/) {
      head = substr($0, 1, RLENGTH - 1); key = head; sub(/^[ \t]*(export[ \t]+)?/, "", key)
      if (key in over) { print substr(head, 1, length(head) - length(key)) key "=" over[key]; next }
    }
    { print }' "$ENV_FILE"
}

# The settings of $1 (NAME=VALUE lines), in .env.example's order, each group under the comment
# the example gives it.
example_lines() {
  ADD="$1" awk '
    BEGIN {
      n = split(ENVIRON["ADD"], lines, "\n")
      for (i = 1; i <= n; i++) if (lines[i] != "") {
        key = lines[i]; sub(/=.*/, "", key); value = lines[i]; sub(/^[^=]*=/, "", value)
        add[key] = value
      }
    }
    /^[A-Za-z_][A-Za-z0-9_]*=/ {
      key = $0; sub(/=.*/, "", key)
      if (!after_key) { group = comment; id++ }
      after_key = 1; comment = ""
      if (key in add) {
        if (id != printed) { printf "%s", group; printed = id }
        print key "=" add[key]
      }
      next
    }
    /^#/ { if (after_key) comment = ""; after_key = 0; comment = comment $0 "\n"; next }
    { after_key = 0; comment = "" }' "$HERE/.env.example"
}

# After a `git pull`: .env's image pins become this checkout's for STACK_DEVICE and this host's
# GPUs (pick_images, as ./stack init chooses them), unless a pin is the user's own (not one this
# project ever shipped); settings new in .env.example are appended with its defaults (a missing
# key is generated); settings .env.example no longer has are named, and kept. Keys and the
# user's values stay. A changed file is backed up first (.env.bak-<time>, mode 600); then
# ./stack check, and with --apply ./stack up -d --build.
upgrade() {
  local apply=0 arg
  for arg in "$@"; do
    case "$arg" in
      --apply) apply=1 ;;
      *) die "unknown option '$arg' (known: --apply)" ;;
    esac
  done
  [[ -f "$ENV_FILE" ]] || die "no $ENV_FILE: run ./stack init (or set VOICE_STACK_ENV_FILE)"
  local work
  work="$(mktemp -d "${TMPDIR:-/tmp}/stack-upgrade.XXXXXX")"
  # shellcheck disable=SC2064  # the path is fixed now
  trap "rm -rf '$work'" EXIT

  local device picked
  device="$(file_value STACK_DEVICE)"
  device="${device:-cuda}"
  [[ "$device" =~ ^(cuda|cpu)$ ]] || die "STACK_DEVICE must be cuda or cpu (got '$device')"
  if ! picked="$(pick_images "$([[ "$device" == cpu ]] && echo cpu || echo gpu)" 2>"$work/notes")"; then
    sed 's/^stack init:/stack upgrade:/' "$work/notes" >&2
    die "nothing changed"
  fi
  sed 's/^stack init:/stack upgrade:/' "$work/notes" >&2
  [[ "$device" == cpu || "$picked" != *STACK_DEVICE=cpu* ]] ||
    die "STACK_DEVICE is cuda, but no NVIDIA GPU answers nvidia-smi here, so nothing changed:" \
      "fix the driver, or set STACK_DEVICE=cpu in $ENV_FILE for the CPU images; then ./stack upgrade again"

  local line name image value old new order=() replace="" add=""
  local -A example=() target=() known=() has=()
  while IFS= read -r line; do
    name="${line%%=*}" value="${line#*=}"
    example[$name]="$value"
    order+=("$name")
    [[ "$name" != *_IMAGE ]] || { target[$name]="$value"; [[ -z "$value" ]] || known[$value]=1; }
  done < <(grep -E '^[A-Za-z_][A-Za-z0-9_]*=' "$HERE/.env.example")
  while IFS= read -r line; do
    [[ "$line" != *_IMAGE=* ]] || target[${line%%=*}]="${line#*=}"
  done <<<"$picked"
  for line in "${VARIANTS[@]}"; do
    IFS='|' read -r _ _ image _ <<<"$line"
    known[$image]=1
  done
  for image in "${FORMER_PINS[@]}"; do known[$image]=1; done
  while IFS= read -r name; do has[$name]=1; done < <(env_names)

  for name in "${order[@]}"; do
    [[ -n "${target[$name]+set}" && -n "${has[$name]+set}" ]] || continue
    old="$(file_value "$name")" new="${target[$name]}"
    [[ "$old" != "$new" ]] || continue
    if [[ -z "$old" || -n "${known[$old]+set}" ]]; then
      replace+="$name=$new"$'\n'
      value=""
      [[ "$name" != GATEWAY_IMAGE || -n "$new" ]] || value=": the gateway is built from this checkout"
      say "$name: $(shown "$old") -> $(shown "$new")$value"
    else
      say "$name: kept your own $old (this checkout's pin: $(shown "$new"))"
    fi
  done
  for name in "${order[@]}"; do
    [[ -z "${has[$name]+set}" ]] || continue
    if [[ " ${KEYS[*]} " == *" $name "* ]]; then
      value="$(keygen)"
      say "added $name: a fresh key; ${NEW_KEY_USE[$name]}"
    else
      value="${target[$name]-${example[$name]}}"
      say "added $name=$value"
    fi
    add+="$name=$value"$'\n'
  done
  for name in $(env_names); do
    [[ -n "${example[$name]+set}" ]] ||
      say "$name is not in .env.example (your own, or removed or renamed since): kept as it is"
  done

  replace_lines "$replace" >"$work/env"
  if [[ -n "$add" ]]; then
    printf '\n# Added by ./stack upgrade on %s: settings new in .env.example, with its defaults.\n' \
      "$(date +%F)" >>"$work/env"
    example_lines "$add" >>"$work/env"
  fi

  local mode backup=""
  mode="$(file_mode "$ENV_FILE")"
  if ! cmp -s "$work/env" "$ENV_FILE"; then
    backup="$ENV_FILE.bak-$(date +%Y%m%d-%H%M%S)"
    for ((arg = 1; ; arg++)); do  # a second upgrade within the same second
      [[ -e "$backup" ]] || break
      backup="${backup%.bak-*}.bak-$(date +%Y%m%d-%H%M%S)-$arg"
    done
    (umask 077 && cat "$ENV_FILE" >"$backup")
    chmod 600 "$backup" "$ENV_FILE"
    cat "$work/env" >"$ENV_FILE"
    say "wrote $ENV_FILE; the previous file is $backup (to go back: cp -p $backup $ENV_FILE)"
  else
    chmod 600 "$ENV_FILE"
    say "$ENV_FILE already has this checkout's pins and settings"
  fi
  [[ "$mode" == 600 ]] || say "$ENV_FILE was mode $mode, now 600 (it holds the keys)"

  say "running ./stack check"
  if ! VOICE_STACK_ENV_FILE="$ENV_FILE" "${BASH:-bash}" "$HERE/stack" check; then
    say "./stack check failed (above): fix $ENV_FILE, then ./stack check and" \
      "./stack up -d --build${backup:+ (the previous file is $backup)}"
    exit 2
  fi
  if ((apply)); then
    say "running ./stack up -d --build"
    VOICE_STACK_ENV_FILE="$ENV_FILE" "${BASH:-bash}" "$HERE/stack" up -d --build
  else
    say "done: now ./stack up -d --build (builds the gateway from this checkout, recreates what changed)"
  fi
}
