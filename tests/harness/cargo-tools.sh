#!/usr/bin/env bash
# Installs the Rust supply-chain tools pinned in tests/harness/versions.env with
# `cargo install --locked` (each tool's own Cargo.lock), once per machine, cached outside
# the checkout keyed by version:
#   ${SAFEWRITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/safewrite}/bin/<tool>-<version>/bin/<tool>
# and prints, on the last line of stdout, a directory of links to them (progress goes to
# stderr). Needs only cargo: deploy/image/build.sh uses it without Go.
#
#   cargo-tools.sh                      # all four
#   cargo-tools.sh cargo-auditable ...  # only these (of cargo-deny, cargo-auditable,
#                                       # cargo-cyclonedx, rust-audit-info)
#
# A first install compiles each tool (cargo-deny about 400 crates: many minutes on a
# small machine); later runs find the binaries and return at once.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/harness/versions.env
. "$here/versions.env"
cache=${SAFEWRITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/safewrite}
log() { echo "cargo-tools: $*" >&2; }

command -v cargo >/dev/null 2>&1 || { log "cargo is needed (rustup.rs)"; exit 1; }

version_of() {
  case "$1" in
    cargo-deny) echo "$CARGO_DENY_VERSION" ;;
    cargo-auditable) echo "$CARGO_AUDITABLE_VERSION" ;;
    cargo-cyclonedx) echo "$CARGO_CYCLONEDX_VERSION" ;;
    rust-audit-info) echo "$RUST_AUDIT_INFO_VERSION" ;;
    *) log "unknown tool $1 (known: cargo-deny cargo-auditable cargo-cyclonedx rust-audit-info)"; exit 2 ;;
  esac
}

wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(cargo-deny cargo-auditable cargo-cyclonedx rust-audit-info)
set_name=""
for tool in "${wanted[@]}"; do set_name="$set_name-$tool-$(version_of "$tool")"; done
linkdir="$cache/bin/set-cargo$set_name"
mkdir -p "$linkdir"

for tool in "${wanted[@]}"; do
  version=$(version_of "$tool")
  prefix="$cache/bin/$tool-$version"
  binary="$prefix/bin/$tool"
  if [ ! -x "$binary" ]; then
    mkdir -p "$prefix"
    # Concurrent runs install once: the others wait, then find the binary.
    exec {lock}>"$prefix.lock"
    if command -v flock >/dev/null 2>&1; then flock "$lock"; fi
    if [ ! -x "$binary" ]; then
      log "installing $tool $version (first run on this machine only; takes minutes)"
      started=$SECONDS
      nice -n 10 cargo install --quiet --locked --version "$version" --root "$prefix" "$tool" >&2
      log "installed $tool in $((SECONDS - started))s"
    fi
    exec {lock}>&-
  fi
  ln -sfn "$binary" "$linkdir/$tool"
done
echo "$linkdir"
