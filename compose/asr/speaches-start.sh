#!/bin/sh
# Entrypoint of the asr service (speaches): start offline once the model is in the Hugging Face
# cache, download it only when it is not. speaches has no offline setting of its own: with
# PRELOAD_MODELS set it lists the Hub's models on every start before it looks at the cache
# (and exits if that fails), while huggingface_hub, which it loads models through, honours
# HF_HUB_OFFLINE=1 by reading the cache only.
#   VOICE_STACK_ASR_MODEL    the model (a Hugging Face repository id)
#   VOICE_STACK_ASR_OFFLINE  auto (default): offline once cached; never: always preload online
set -eu
model="${VOICE_STACK_ASR_MODEL:?set ASR_MODEL}"
cache="${HF_HUB_CACHE:-${HF_HOME:-$HOME/.cache/huggingface}/hub}"
repo="$cache/models--$(printf '%s' "$model" | sed 's|/|--|g')"

# Downloaded in full: weights in a snapshot, no partial (.incomplete) blob left behind.
cached() {
  [ -d "$repo/snapshots" ] || return 1
  [ -z "$(find "$repo/blobs" -name '*.incomplete' 2>/dev/null | head -n 1)" ] || return 1
  [ -n "$(find -L "$repo/snapshots" -type f \( -name '*.bin' -o -name '*.onnx' \
    -o -name '*.safetensors' \) 2>/dev/null | head -n 1)" ]
}

unset PRELOAD_MODELS HF_HUB_OFFLINE
if [ "${VOICE_STACK_ASR_OFFLINE:-auto}" = auto ] && cached; then
  echo "asr: $model is cached: starting offline (HF_HUB_OFFLINE=1, no preload)" >&2
  export HF_HUB_OFFLINE=1
else
  echo "asr: downloading $model if needed (needs the Hugging Face Hub)" >&2
  export PRELOAD_MODELS="[\"$model\"]"
fi
exec "$@"
