#!/usr/bin/env bash
# Follows README.md's "Install" section in a new, empty project, as a newcomer would:
#
#   bash test/install.sh      # after `npm ci && npm run build` here (test.sh does both)
#
# 1. checks that the README's install commands are the ones this script runs (below);
# 2. `npm pack` of this checkout, `npm init -y`, `npm pkg set type=module`, `npm install`
#    of the packed file (which brings the peer dependency @kubernetes/client-node), then
#    typescript and @types/node as dev dependencies (the versions this package pins, where
#    the README takes the newest: with `--prefer-offline` npm's cache then serves every
#    package, with no registry once it holds them), and the README's tsconfig.json, taken
#    from the ```json block after its "<!-- install: tsconfig.json -->" marker;
# 3. saves the README's first example as main.ts, runs `npx tsc` and, when
#    SAFEWRITE_ADDRESS names a sidecar, `node main.js`, whose output is printed.
# Run by test/readme.test.ts, inside the harness; the project is removed afterwards.
set -euo pipefail

package=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readme=$package/README.md
[ -f "$package/dist/index.js" ] ||
  { echo "install.sh: build the package first (npm ci && npm run build)" >&2; exit 1; }

# block OPENING [MARKER]: the lines of the first fenced block that opens with the line
# OPENING (after the line MARKER, when given).
block() {
  awk -v opening="$1" -v marker="${2:-}" '
    marker != "" && !seen { seen = ($0 == marker); next }
    !inside && $0 == opening { inside = 1; next }
    inside && $0 == "```" { exit }
    inside { print }' "$readme"
}

# The README's commands, as this script runs them.
commands=$(block '```sh' '## Install')
for command in "npm ci && npm run build && npm pack" "npm init -y && npm pkg set type=module" \
  "npm install <path-to>/safewrite/clients/typescript/safewrite-client-" "npm install --save-dev typescript @types/node@20"; do
  grep -qF -- "$command" <<<"$commands" ||
    { echo "install.sh: README.md's Install commands no longer say: $command" >&2; exit 1; }
done

project=$(mktemp -d "${TMPDIR:-/tmp}/safewrite-ts-install.XXXXXX")
trap 'rm -rf "$project"' EXIT
cd "$project"

block '```json' "<!-- install: tsconfig.json -->" >tsconfig.json
[ -s tsconfig.json ] || { echo "install.sh: README.md has no \`\`\`json block after <!-- install: tsconfig.json -->" >&2; exit 1; }
block '```ts' >main.ts

pinned() { node -p "require('$package/package.json').devDependencies['$1']"; }
npm=(npm install --prefer-offline --no-audit --no-fund --loglevel=error)
tarball=$(cd "$package" && npm pack --ignore-scripts --silent --pack-destination "$project")
npm init -y >/dev/null && npm pkg set type=module
"${npm[@]}" "./$tarball"
"${npm[@]}" --save-dev "typescript@$(pinned typescript)" "@types/node@$(pinned @types/node)"
[ -d node_modules/@kubernetes/client-node ] ||
  { echo "install.sh: npm did not install the peer dependency @kubernetes/client-node" >&2; exit 1; }

npx tsc
if [ -n "${SAFEWRITE_ADDRESS:-}" ]; then
  node main.js
else
  echo "install.sh: main.ts type-checked; SAFEWRITE_ADDRESS is not set, so it did not run" >&2
fi
