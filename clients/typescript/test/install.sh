#!/usr/bin/env bash
# Follows README.md's "Install" section in a new, empty project, as a newcomer would:
#
#   bash test/install.sh      # after `npm ci && npm run build` here (test.sh does both)
#
# 1. writes the README's package.json and tsconfig.json, taken from the ```json blocks
#    after its "<!-- install: package.json -->" and "<!-- install: tsconfig.json -->"
#    markers, so the test follows the README as it stands;
# 2. `npm install <this checkout>`, then typescript and @types/node as dev dependencies
#    (the versions this package pins, where the README takes the newest: the test then
#    needs no registry once npm's cache holds them, and `--prefer-offline` uses it);
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

project=$(mktemp -d "${TMPDIR:-/tmp}/safewrite-ts-install.XXXXXX")
trap 'rm -rf "$project"' EXIT
cd "$project"

for file in package.json tsconfig.json; do
  block '```json' "<!-- install: $file -->" >"$file"
  [ -s "$file" ] || { echo "install.sh: README.md has no \`\`\`json block after <!-- install: $file -->" >&2; exit 1; }
done
block '```ts' >main.ts

pinned() { node -p "require('$package/package.json').devDependencies['$1']"; }
npm=(npm install --prefer-offline --no-audit --no-fund --loglevel=error)
"${npm[@]}" "$package"
"${npm[@]}" --save-dev "typescript@$(pinned typescript)" "@types/node@$(pinned @types/node)"

npx tsc
if [ -n "${SAFEWRITE_ADDRESS:-}" ]; then
  node main.js
else
  echo "install.sh: main.ts type-checked; SAFEWRITE_ADDRESS is not set, so it did not run" >&2
fi
