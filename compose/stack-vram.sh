# shellcheck shell=bash
# Sourced by ./stack: does the chosen model, context and speech set fit this host's GPU memory?
# The arithmetic is compose/vram.py's (python3, standard library only: it reads the GGUF's
# header); this file hands it the settings and each GPU's memory. `./stack check` refuses a set
# that cannot fit, saying what to lower; `./stack init` prints the context per slot that fits.
# VOICE_STACK_SKIP_VRAM_CHECK=1 skips it (the estimate cannot see everything LLM_EXTRA_ARGS does);
# VOICE_STACK_PYTHON names another python3.
#
# Needs from ./stack: env_value, die, HERE.

# The host's GPUs as "name=MiB" lines (memory.total); nothing without a GPU. A query of its own,
# beside host_gpus in stack-gpu.sh. nvidia-smi prints "NVIDIA GeForce RTX 4090, 24564" per card.
gpu_memory() {
  command -v nvidia-smi >/dev/null || return 0
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits 2>/dev/null |
    sed -n 's/^ *\([^,]*[^ ,]\) *, *\([0-9][0-9]*\) *$/\1=\2/p' || true
}

# vram MODE (check or propose): vram.py on this .env's settings. Status 0: it fits, or there was
# nothing to check; 3: it does not fit (vram.py said why); 2: the GGUF or a flag is unreadable.
# A skip is one line, in check mode only (init runs before the model is chosen).
vram() {
  local mode=$1 python=${VOICE_STACK_PYTHON:-python3} dir file draft gpus gpu asr args=() why=""
  local parallel ctx layers fa spec n_max
  dir="$(env_value LLM_MODELS_DIR)"
  file="$(env_value LLM_MODEL_FILE)"
  [[ "$dir" == /* || -z "$dir" ]] || dir="$HERE/$dir"
  if [[ -n "${VOICE_STACK_SKIP_VRAM_CHECK:-}" ]]; then why="VOICE_STACK_SKIP_VRAM_CHECK is set"
  elif [[ "$(env_value STACK_DEVICE)" == cpu ]]; then why="STACK_DEVICE=cpu"
  elif [[ -z "$dir" || -z "$file" || ! -f "$dir/$file" ]]; then return 0  # check_models says why
  elif ! command -v "$python" >/dev/null; then why="no $python on this host"
  elif ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then
    why="$python is older than 3.9"
  else
    gpus="$(gpu_memory)"
    [[ -n "$gpus" ]] || why="nvidia-smi reports no GPU memory"
  fi
  if [[ -n "$why" ]]; then
    [[ "$mode" != check ]] || echo "stack: GPU memory check skipped: $why" >&2
    return 0
  fi
  while read -r gpu; do args+=(--gpu "$gpu"); done <<<"$gpus"
  draft="$(env_value LLM_DRAFT_MODEL_FILE)"
  [[ -z "$draft" ]] || args+=(--draft "$dir/$draft")
  if [[ ",$(env_value COMPOSE_PROFILES | tr -d ' ')," == *,speech,* ]]; then
    asr="$(env_value ASR_MODEL)"
    args+=(--asr-model "${asr:-Systran/faster-distil-whisper-large-v3}" --tts)
  fi
  # compose's own defaults for what is unset or empty
  parallel="$(env_value LLM_PARALLEL)" ctx="$(env_value LLM_CTX_PER_SLOT)"
  layers="$(env_value LLM_GPU_LAYERS)" fa="$(env_value LLM_FLASH_ATTN)"
  spec="$(env_value LLM_SPEC_TYPE)" n_max="$(env_value LLM_SPEC_DRAFT_N_MAX)"
  "$python" "$HERE/vram.py" "$mode" --model "$dir/$file" --parallel "${parallel:-4}" \
    --ctx-per-slot "${ctx:-8192}" --gpu-layers "${layers:-999}" --flash-attn "${fa:-auto}" \
    --spec-type "${spec:-none}" --spec-draft-n-max "${n_max:-3}" \
    --extra-args "$(env_value LLM_EXTRA_ARGS)" "${args[@]}"
}

# ./stack check: refuse a set that cannot fit (vram.py printed the breakdown and what to lower).
check_vram() {
  local status=0
  vram check || status=$?
  case $status in
    0) ;;
    3) die "the LLM and the speech servers do not fit this host's GPU memory (see above;" \
         "VOICE_STACK_SKIP_VRAM_CHECK=1 skips this check)" ;;
    *) die "could not size the GPU memory this set needs (see above;" \
         "VOICE_STACK_SKIP_VRAM_CHECK=1 skips this check)" ;;
  esac
}

# ./stack init: the context per slot that fits, when the model is known already.
propose_ctx() { vram propose || true; }
