#!/usr/bin/env bash
# Fuzz smoke test: builds the fuzz targets and runs each for a short, bounded time from
# the committed seeds (fuzz/seeds/<target>), in a scratch corpus. Exits non-zero when a
# target crashes (panic, stack overflow, timeout, out of memory); the input that did it
# is saved under fuzz/artifacts/<target>/.
#
#   fuzz/smoke.sh                  # every target, 20 s each
#   fuzz/smoke.sh 60 cel mutation  # these targets, 60 s each
#
# Long runs: cargo fuzz run --sanitizer none cel fuzz/corpus/cel fuzz/seeds/cel -- \
#   -max_total_time=1800 -print_final_stats=1
#
# cargo-fuzz passes flags that only nightly compilers accept; RUSTC_BOOTSTRAP=1 lets a
# stable one accept them. The first run installs cargo-fuzz (into ~/.cargo/bin) and
# builds everything (several minutes); later runs rebuild only what changed. If
# cargo-fuzz cannot be installed, the targets are built with libfuzzer-sys directly.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
seconds="${1:-20}"
shift || true
if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  targets=(cel mutation request schema)
fi
cargo_fuzz_version=0.13.2
export RUSTC_BOOTSTRAP=1

host="$(rustc -vV | sed -n 's/^host: //p')"
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "smoke: installing cargo-fuzz $cargo_fuzz_version" >&2
  cargo install --locked cargo-fuzz --version "$cargo_fuzz_version" >&2 || true
fi

if cargo fuzz --version >/dev/null 2>&1; then
  echo "smoke: building ${targets[*]} with cargo-fuzz" >&2
  for target in "${targets[@]}"; do
    (cd "$root" && cargo fuzz build --sanitizer none "$target")
  done
  bin_dir="$here/target/$host/release"
else
  echo "smoke: cargo-fuzz is not available; building with libfuzzer-sys directly" >&2
  export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions"
  for target in "${targets[@]}"; do
    cargo build --release --manifest-path "$here/Cargo.toml" --target-dir "$here/target/direct" \
      --target "$host" --bin "$target"
  done
  bin_dir="$here/target/direct/$host/release"
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
failed=()
for target in "${targets[@]}"; do
  mkdir -p "$scratch/$target" "$here/artifacts/$target"
  echo "smoke: fuzzing $target for ${seconds}s" >&2
  if ! "$bin_dir/$target" "$scratch/$target" "$here/seeds/$target" \
    -max_total_time="$seconds" -timeout=10 -max_len=8192 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$here/artifacts/$target/" \
    >"$scratch/$target.log" 2>&1; then
    failed+=("$target")
    tail -n 40 "$scratch/$target.log" >&2
  fi
  grep -E '^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::peak_rss_mb)' \
    "$scratch/$target.log" | sed "s/^/smoke: $target: /" >&2 || true
done

if [ "${#failed[@]}" -gt 0 ]; then
  echo "smoke: crashed: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
echo "smoke: no crash in ${targets[*]}" >&2
