#!/usr/bin/env bash
# The licence half of the dependency policy (deny.toml) for the client libraries: every
# dependency a user's program links when it uses a client must be under a permissive
# licence (the same families deny.toml allows: Apache-2.0, MIT, BSD-2/3-Clause, ISC,
# Zlib, Unicode, and for Python the PSF's). Read from what each client's own test.sh
# installed, so it runs after them (tests/run-all.sh) and costs seconds:
#   Go          the modules compiled into clients/go's packages (`go list -deps`),
#               identified by their LICENSE text
#   TypeScript  production dependencies in clients/typescript/node_modules (`npm query
#               .prod`), by their package.json licence
#   Python      safewrite-client's requirements, recursively, in the virtualenv
#               clients/python/test.sh made, by their metadata (License-Expression,
#               License, classifiers)
#   Java        the runtime dependencies of clients/java (`mvn dependency:list`, the
#               resolution its test.sh already made), by the <licenses> of each one's
#               POM in the local Maven repository (or its parents'); a POM naming
#               several licences offers them as alternatives
# Prints each ecosystem's licences with counts; exits non-zero on any dependency whose
# licence is unknown or not allowed, naming it.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
status=0
bad() { echo "licences: NOT ALLOWED: $*" >&2; status=1; }
allowed_spdx='^(Apache-2\.0|MIT|BSD-2-Clause|BSD-3-Clause|ISC|Zlib|0BSD|Unlicense|Unicode-3\.0|Python-2\.0|PSF-2\.0|CC0-1\.0|BlueOak-1\.0\.0)$'
# An SPDX expression passes when each AND-term has an allowed choice.
expression_ok() {
  python3 - "$1" "$allowed_spdx" <<'PY'
import re, sys
expr, allowed = sys.argv[1], re.compile(sys.argv[2])
expr = expr.replace("(", " ").replace(")", " ")
ok = all(any(allowed.match(c.strip()) for c in re.split(r"\s+OR\s+|/", term))
         for term in re.split(r"\s+AND\s+", expr))
sys.exit(0 if ok and expr.strip() else 1)
PY
}

# --- Go -----------------------------------------------------------------------------------
classify() { # LICENSE_FILE -> SPDX id or UNKNOWN
  local text
  text=$(tr -s '[:space:]' ' ' <"$1")
  if grep -q 'Apache License' <<<"$text" && grep -q 'Version 2.0' <<<"$text"; then echo Apache-2.0
  elif grep -q 'Permission is hereby granted, free of charge' <<<"$text"; then echo MIT
  elif grep -q 'Redistribution and use in source and binary forms' <<<"$text"; then
    if grep -Eqi 'Neither the name|names of its contributors' <<<"$text"; then echo BSD-3-Clause; else echo BSD-2-Clause; fi
  elif grep -q 'Permission to use, copy, modify, and/or distribute' <<<"$text"; then echo ISC
  else echo UNKNOWN
  fi
}
if command -v go >/dev/null 2>&1; then
  go_out=$(cd "$root/clients/go" && go list -deps -f '{{with .Module}}{{if not .Main}}{{.Path}}@{{.Version}} {{.Dir}}{{end}}{{end}}' ./... | sort -u)
  declare -A go_count=()
  while read -r module dir; do
    [ -n "$module" ] || continue
    file=$(find "$dir" -maxdepth 1 -type f \( -iname 'LICENSE*' -o -iname 'LICENCE*' -o -iname 'COPYING*' \) | sort | head -n 1)
    if [ -z "$file" ]; then bad "Go $module: no licence file"; continue; fi
    id=$(classify "$file")
    if [ "$id" = UNKNOWN ]; then bad "Go $module: unrecognised licence ($(basename "$file"))"; continue; fi
    go_count[$id]=$((${go_count[$id]:-0} + 1))
  done <<<"$go_out"
  summary=""
  for id in "${!go_count[@]}"; do summary="$summary $id:${go_count[$id]}"; done
  echo "licences: Go client, $(grep -c . <<<"$go_out") modules compiled in:$summary"
else
  echo "licences: Go client SKIPPED (no go)"
fi

# --- TypeScript ---------------------------------------------------------------------------
if [ -d "$root/clients/typescript/node_modules" ] && command -v npm >/dev/null 2>&1; then
  npm_out=$(cd "$root/clients/typescript" && npm query '.prod' 2>/dev/null |
    jq -r '.[] | select(.name != "@safewrite/client") | "\(.name)@\(.version)\t\(if (.license | type) == "object" then .license.type else (.license // "UNKNOWN") end)"' | sort -u)
  while IFS=$'\t' read -r package licence; do
    [ -n "$package" ] || continue
    expression_ok "$licence" || bad "npm $package: $licence"
  done <<<"$npm_out"
  echo "licences: TypeScript client, $(grep -c . <<<"$npm_out") production packages:$(cut -f2 <<<"$npm_out" | sort | uniq -c | sed -E 's/^ *([0-9]+) (.*)$/ \2:\1/' | tr -d '\n')"
else
  echo "licences: TypeScript client SKIPPED (no node_modules: clients/typescript/test.sh installs them)"
fi

# --- Python -------------------------------------------------------------------------------
hash_of() { { cat "$@"; python3 -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-16; }
venv=${XDG_CACHE_HOME:-$HOME/.cache}/safewrite/venv-$(cd "$root/clients/python" && hash_of pyproject.toml)
if [ -x "$venv/bin/python" ]; then
  py_out=$("$venv/bin/python" - <<'PY'
import re
from importlib import metadata

def name_of(req):
    return re.match(r"[A-Za-z0-9._-]+", req).group(0)

def licence_of(dist):
    meta = dist.metadata
    if meta.get("License-Expression"):
        return meta["License-Expression"]
    classifiers = [c.split(" :: ")[-1] for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    table = {"Apache Software License": "Apache-2.0", "MIT License": "MIT", "BSD License": "BSD-3-Clause",
             "ISC License (ISCL)": "ISC", "Python Software Foundation License": "PSF-2.0"}
    if classifiers:
        return " OR ".join(table.get(c, c) for c in classifiers)
    text = (meta.get("License") or "").strip()
    first = text.splitlines()[0] if text else "UNKNOWN"
    return {"Apache 2.0": "Apache-2.0", "Apache License 2.0": "Apache-2.0", "BSD": "BSD-3-Clause",
            "3-Clause BSD License": "BSD-3-Clause", "MIT License": "MIT"}.get(first, first)

seen, queue = {}, ["safewrite-client"]
while queue:
    name = queue.pop()
    key = name.lower().replace("_", "-")
    if key in seen:
        continue
    dist = metadata.distribution(name)
    seen[key] = dist
    for req in dist.requires or []:
        if "extra ==" in req:
            continue
        try:
            metadata.distribution(name_of(req))
        except metadata.PackageNotFoundError:
            continue  # a marker that does not apply to this Python
        queue.append(name_of(req))
for key, dist in sorted(seen.items()):
    if key != "safewrite-client":
        print(f"{dist.metadata['Name']}@{dist.version}\t{licence_of(dist)}")
PY
)
  while IFS=$'\t' read -r package licence; do
    [ -n "$package" ] || continue
    expression_ok "$licence" || bad "PyPI $package: $licence"
  done <<<"$py_out"
  echo "licences: Python client, $(grep -c . <<<"$py_out") required distributions:$(cut -f2 <<<"$py_out" | sort | uniq -c | sed -E 's/^ *([0-9]+) (.*)$/ \2:\1/' | tr -d '\n')"
else
  echo "licences: Python client SKIPPED (no virtualenv: clients/python/test.sh makes it)"
fi
# --- Java ---------------------------------------------------------------------------------
maven_repo=${MAVEN_REPOSITORY:-$HOME/.m2/repository}
java_list="$root/clients/java/target/runtime-dependencies.txt"
if command -v mvn >/dev/null 2>&1 && [ -d "$maven_repo" ] &&
  (cd "$root/clients/java" && mvn -q -B dependency:list -DincludeScope=runtime \
    -DoutputFile="$java_list" >/dev/null 2>&1); then
  java_out=$(python3 - "$java_list" "$maven_repo" <<'PY'
import os, re, sys, xml.etree.ElementTree as ET
listing, repo = sys.argv[1], sys.argv[2]

def child(element, name):
    return next((c for c in element if c.tag.split("}", 1)[-1] == name), None)

def licences(group, artifact, version, depth=0):
    path = os.path.join(repo, *group.split("."), artifact, version, f"{artifact}-{version}.pom")
    if depth > 8 or not os.path.exists(path):
        return []
    root = ET.parse(path).getroot()
    block = child(root, "licenses")
    if block is not None and len(block):
        return [" ".join((child(l, k).text or "") for k in ("name", "url") if child(l, k) is not None)
                for l in block]
    parent = child(root, "parent")
    if parent is None:
        return []
    return licences(*(child(parent, k).text.strip() for k in ("groupId", "artifactId", "version")),
                    depth + 1)

def spdx(text):
    t = text.lower()
    if "apache" in t and "2" in t:
        return "Apache-2.0"
    if re.search(r"\bmit\b", t):
        return "MIT"
    if "bsd" in t:
        return "BSD-2-Clause" if ("2-clause" in t or "simplified" in t) else "BSD-3-Clause"
    return "UNKNOWN(" + " ".join(text.split()) + ")"

for line in open(listing):
    parts = line.strip().split(":")
    if len(parts) < 5 or parts[-1] not in ("compile", "runtime"):
        continue
    found = sorted({spdx(n) for n in licences(parts[0], parts[1], parts[-2])})
    print(f"{parts[0]}:{parts[1]}@{parts[-2]}\t{' OR '.join(found) or 'UNKNOWN'}")
PY
)
  while IFS=$'\t' read -r artifact licence; do
    [ -n "$artifact" ] || continue
    expression_ok "$licence" || bad "Maven $artifact: $licence"
  done <<<"$java_out"
  echo "licences: Java client, $(grep -c . <<<"$java_out") runtime dependencies:$(cut -f2 <<<"$java_out" | sort | uniq -c | sed -E 's/^ *([0-9]+) (.*)$/ \2:\1/' | tr -d '\n')"
else
  echo "licences: Java client SKIPPED (no Maven, or clients/java's dependencies could not be listed)"
fi

[ "$status" = 0 ] || { echo "licences: some client dependencies are not under an allowed licence (above)" >&2; exit 1; }
echo "licences: client dependencies ok"
