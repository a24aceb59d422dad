#!/bin/sh
# The official nginx image's template step, as documented for it: every
# $NGINX_ENVSUBST_TEMPLATE_DIR/*$NGINX_ENVSUBST_TEMPLATE_SUFFIX is rendered with envsubst into
# $NGINX_ENVSUBST_OUTPUT_DIR, replacing only the defined variables whose names match
# $NGINX_ENVSUBST_FILTER; then nginx runs in the foreground.
set -eu
if [ "${1:-}" = nginx ]; then
  dir="${NGINX_ENVSUBST_TEMPLATE_DIR:-/etc/nginx/templates}"
  suffix="${NGINX_ENVSUBST_TEMPLATE_SUFFIX:-.template}"
  out="${NGINX_ENVSUBST_OUTPUT_DIR:-/etc/nginx/conf.d}"
  filter="${NGINX_ENVSUBST_FILTER:-}"
  names="$(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p' | grep -E "${filter:-.}" || true)"
  defined="$(for name in $names; do printf '${%s} ' "$name"; done)"
  for template in "$dir"/*"$suffix"; do
    [ -f "$template" ] || continue
    target="$out/$(basename "$template" "$suffix")"
    envsubst "$defined" <"$template" >"$target"
    echo "docker-entrypoint.sh: rendered $template to $target" >&2
  done
fi
exec "$@"
