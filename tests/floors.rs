//! The house's floors, checked from the source text of every crate of the workspace:
//! the sidecar's `src/` and the crates below it (`crates/*/src/`). The compiler keeps the
//! crates in their order (a crate cannot import from one that depends on it); this test
//! checks what it does not. It reads the workspace as one tree: the sidecar's `src/` is
//! the root, and each crate below it is a wing of its own name (`crates/engine/src/` is
//! `engine/`, its `lib.rs` is `engine/mod.rs`, and `safewrite_engine::x` and, inside it,
//! `crate::x` both name `engine::x`). Over that tree:
//!
//! - the top-level wings keep the order declared in the drawing of `docs/layout.md`
//!   (top floor first): every wing is declared, every declared wing exists, and no
//!   wing imports from its own floor or a floor above it;
//! - no import cycle between any two files;
//! - no file over 400 lines of code (not blank, not a comment) and no function over 80
//!   lines (its `fn` line to its closing brace); the test prints the largest file and the
//!   five longest functions;
//! - no two wings define a type (struct, enum, trait) of the same name, so a name says
//!   which thing it is wherever it is read.
//! - a file over 200 lines marks each type's impls with `// === impl Type ===`, as tower
//!   and kubert do, so a long file reads by sections.
//!
//! An import is a path: `crate::a::b` (a `use`, a path in code, a doc link or a path named
//! in a comment, each item of a `crate::{a, b::c}` group), `super::` and `self::` paths (relative to the file's
//! module), a path through one of the file's own child modules (`child::X` after
//! `mod child;`), a path into a crate of the workspace (`safewrite_engine::X`), and in
//! `main.rs` a `safewrite::` path. It points at the file of the
//! deepest module its path names (`a/b.rs` or `a/b/mod.rs`, else the module above it), so
//! `use super::*` imports the parent module's file. A module's re-export of its own
//! descendants (`pub use child::X`) is a façade, not an import: tower's
//! `timeout/mod.rs` re-exporting `layer.rs`, which uses `super::Timeout`, is no cycle.
//!
//! Test code is an inline `#[cfg(test)] mod ... {` to the end of its file (the convention
//! here: the tests come last) and every file declared as a `#[cfg(test)] mod name;`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The most lines of code (not blank, not a comment, not test code) in one file.
const MAX_LINES: usize = 400;
/// The most lines of one function, its `fn` line to its closing brace.
const MAX_FN_LINES: usize = 80;

/// The crates of the workspace: each one's name in paths, its `src/` folder, and the
/// wing it is in the one tree (`""`: the root, the sidecar).
const CRATES: &[(&str, &str, &str)] = &[
    ("safewrite", "src", ""),
    ("safewrite_api", "crates/api/src", "api"),
    ("safewrite_mutation", "crates/mutation/src", "mutation"),
    ("safewrite_client", "crates/client/src", "client"),
    ("safewrite_engine", "crates/engine/src", "engine"),
];

struct Source {
    /// The path in the one tree, with `/` separators (`engine/write/run.rs`).
    path: String,
    /// Its code, without its tests; line numbers are the file's own.
    code: String,
}

fn files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The folder holding the children of the file at `path` (`""` for the crate root).
fn children_dir(path: &str) -> String {
    if path == "lib.rs" || path == "main.rs" {
        String::new()
    } else if let Some(parent) = path.strip_suffix("/mod.rs") {
        format!("{parent}/")
    } else {
        format!("{}/", path.trim_end_matches(".rs"))
    }
}

/// The files declared by `text` (the file at `path`) as `#[cfg(test)] mod name;`.
fn test_files(path: &str, text: &str) -> Vec<String> {
    let dir = children_dir(path);
    let lines: Vec<&str> = text.lines().collect();
    let mut declared = Vec::new();
    for pair in lines.windows(2) {
        if pair[0].trim() == "#[cfg(test)]"
            && let Some(name) = pair[1]
                .trim()
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'))
        {
            declared.push(format!("{dir}{name}.rs"));
            declared.push(format!("{dir}{name}/mod.rs"));
        }
    }
    declared
}

/// `text` without its inline test module (from `#[cfg(test)]` before `mod ... {` on).
fn without_tests(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let end = (0..lines.len().saturating_sub(1))
        .find(|&i| {
            lines[i] == "#[cfg(test)]"
                && lines[i + 1].starts_with("mod ")
                && lines[i + 1].trim_end().ends_with('{')
        })
        .unwrap_or(lines.len());
    lines[..end].join("\n")
}

/// The path in the one tree of `file` (under the `src/` folder of the crate whose wing
/// is `wing`).
fn in_tree(wing: &str, file: &str) -> String {
    match (wing, file) {
        ("", _) => file.to_string(),
        (_, "lib.rs") => format!("{wing}/mod.rs"),
        _ => format!("{wing}/{file}"),
    }
}

/// The file in the repository of `path`, a path in the one tree.
fn real(path: &str) -> String {
    for (_, src, wing) in CRATES.iter().filter(|(_, _, wing)| !wing.is_empty()) {
        if path == format!("{wing}/mod.rs") {
            return format!("{src}/lib.rs");
        }
        if let Some(rest) = path.strip_prefix(&format!("{wing}/")) {
            return format!("{src}/{rest}");
        }
    }
    format!("src/{path}")
}

fn sources() -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut texts = BTreeMap::new();
    for (_, src, wing) in CRATES {
        let src = root.join(src);
        let mut paths = Vec::new();
        files(&src, &mut paths);
        for path in paths {
            let file = path
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            texts.insert(
                in_tree(wing, &file),
                std::fs::read_to_string(&path).expect("read a source file"),
            );
        }
    }
    let tests: BTreeSet<String> = texts
        .iter()
        .flat_map(|(path, text)| test_files(path, text))
        .collect();
    texts
        .into_iter()
        .filter(|(path, _)| !tests.contains(path))
        .map(|(path, text)| Source {
            code: without_tests(&text),
            path,
        })
        .collect()
}

// ---- imports -------------------------------------------------------------------------

/// The module path of the file at `path` (`a/b.rs` and `a/b/mod.rs` are `a::b`).
fn module_of(path: &str) -> Vec<String> {
    if path == "lib.rs" || path == "main.rs" {
        return Vec::new();
    }
    let path = path
        .strip_suffix("/mod.rs")
        .unwrap_or_else(|| path.trim_end_matches(".rs"));
    path.split('/').map(str::to_string).collect()
}

/// The wing (top-level module) of the file at `path`; `main.rs` is the wing `main`, the
/// crate root `lib.rs` none.
fn wing_of(path: &str) -> Option<String> {
    match path {
        "lib.rs" => None,
        "main.rs" => Some("main".to_string()),
        _ => module_of(path).into_iter().next(),
    }
}

/// The names of the child modules `code` declares (`mod name;`, `pub mod name;`).
fn children(code: &str) -> BTreeSet<String> {
    code.lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line.strip_prefix("pub ").or_else(|| {
                line.strip_prefix("pub(")
                    .and_then(|r| r.split_once(") ").map(|(_, r)| r))
            });
            let name = rest
                .unwrap_or(line)
                .strip_prefix("mod ")?
                .strip_suffix(';')?;
            Some(name.to_string())
        })
        .collect()
}

/// One path `code` names: where it starts (1-based line), whether it sits in a re-export
/// (`pub use ...;`), and its segments as written (`crate`, `super`, `self`, a name...).
#[derive(Debug, PartialEq)]
struct Named {
    line: usize,
    reexport: bool,
    segments: Vec<String>,
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The byte ranges of `code`'s re-exports: statements that start a line with `pub use` or
/// `pub(...) use` and end at the next `;`.
fn reexports(code: &str) -> Vec<(usize, usize)> {
    let mut ranges = Vec::new();
    let mut at = 0;
    for line in code.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let is = trimmed.starts_with("pub use ")
            || (trimmed.starts_with("pub(")
                && trimmed
                    .split_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with("use ")));
        if is {
            let end = code[at..].find(';').map_or(code.len(), |e| at + e);
            ranges.push((at, end));
        }
        at += line.len();
    }
    ranges
}

/// Every path `code` names whose first segment is one of `roots`.
fn named(code: &str, roots: &[&str]) -> Vec<Named> {
    let reexports = reexports(code);
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    for root in roots {
        let key = format!("{root}::");
        for (at, _) in code.match_indices(&key) {
            // Only a path's first segment: not `x_crate::`, `a::crate::`, `$crate::`.
            if at > 0 {
                let before = code[..at].chars().next_back().unwrap();
                if is_ident(before) || before == '$' || before == '.' {
                    continue;
                }
                if code[..at].ends_with("::") {
                    continue;
                }
            }
            // `super::super::` is one path, found at its first `super`.
            let mut paths = Vec::new();
            let mut prefix = vec![root.to_string()];
            let mut pos = at + key.len();
            while code[pos..].starts_with("super::") && *root == "super" {
                prefix.push("super".to_string());
                pos += "super::".len();
            }
            group_or_path(code, pos, prefix, &mut paths);
            let reexport = reexports.iter().any(|&(s, e)| s <= at && at < e);
            for (item_at, segments) in paths {
                let line = bytes[..item_at].iter().filter(|&&b| b == b'\n').count() + 1;
                found.push(Named {
                    line,
                    reexport,
                    segments,
                });
            }
        }
    }
    found.sort_by_key(|n| n.line);
    found
}

fn skip_space(code: &str, pos: usize) -> usize {
    code.len() - code[pos..].trim_start().len()
}

/// Reads the rest of a path at `pos` (after `prefix::`): more segments, then a name, a
/// `*` or a `{...}` group of further paths; pushes each full path with where it starts.
fn group_or_path(
    code: &str,
    mut pos: usize,
    mut prefix: Vec<String>,
    out: &mut Vec<(usize, Vec<String>)>,
) -> usize {
    let start = pos;
    loop {
        let rest = &code[pos..];
        if rest.starts_with('{') {
            pos += 1;
            loop {
                pos = skip_space(code, pos);
                if code[pos..].is_empty() {
                    return pos;
                }
                if code[pos..].starts_with('}') {
                    return pos + 1;
                }
                let item = pos;
                pos = skip_space(code, group_or_path(code, pos, prefix.clone(), out));
                if let Some(alias) = code[pos..].strip_prefix("as ") {
                    let alias = alias.trim_start();
                    let name: usize = alias
                        .chars()
                        .take_while(|&c| is_ident(c))
                        .map(char::len_utf8)
                        .sum();
                    pos = code.len() - alias.len() + name;
                    pos = skip_space(code, pos);
                }
                if code[pos..].starts_with(',') {
                    pos += 1;
                } else if pos == item {
                    // Not a path: skip to the group's next item or its end.
                    pos += code[pos..].find([',', '}']).unwrap_or(code.len() - pos);
                }
            }
        }
        let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        if name.is_empty() {
            // `*`, or something that is not a path: the path ends at its prefix.
            if rest.starts_with('*') {
                pos += 1;
            }
            out.push((start, prefix));
            return pos;
        }
        pos += name.len();
        if name != "self" {
            prefix.push(name);
        }
        if code[pos..].starts_with("::") {
            pos += 2;
        } else {
            out.push((start, prefix));
            return pos;
        }
    }
}

/// The module path `segments` names, written in the file whose module is `module`.
fn absolute(module: &[String], segments: &[String]) -> Option<Vec<String>> {
    let first = segments.first()?.as_str();
    if let Some((_, _, wing)) = CRATES.iter().find(|(name, _, _)| *name == first) {
        let mut path = wing_path(wing);
        path.extend(segments[1..].iter().cloned());
        return Some(path);
    }
    let mut path: Vec<String> = match first {
        // `crate::` in a crate below the sidecar names that crate's wing.
        "crate" => match module.first() {
            Some(wing) if CRATES.iter().any(|(_, _, w)| !w.is_empty() && w == wing) => {
                vec![wing.clone()]
            }
            _ => Vec::new(),
        },
        "self" => module.to_vec(),
        "super" => {
            let ups = segments.iter().take_while(|s| *s == "super").count();
            let kept = module.len().checked_sub(ups)?;
            let mut path = module[..kept].to_vec();
            path.extend(segments[ups..].iter().cloned());
            return Some(path);
        }
        // A path through one of the file's own child modules.
        _ => {
            let mut path = module.to_vec();
            path.push(segments[0].clone());
            path
        }
    };
    path.extend(segments[1..].iter().cloned());
    Some(path)
}

/// The module path of a crate's wing (`[]` for the root).
fn wing_path(wing: &str) -> Vec<String> {
    if wing.is_empty() {
        Vec::new()
    } else {
        vec![wing.to_string()]
    }
}

/// The file that defines the deepest module of `path` among `files`.
fn resolve(path: &[String], files: &BTreeSet<String>) -> String {
    for depth in (1..=path.len()).rev() {
        let joined = path[..depth].join("/");
        for candidate in [format!("{joined}.rs"), format!("{joined}/mod.rs")] {
            if files.contains(&candidate) {
                return candidate;
            }
        }
    }
    "lib.rs".to_string()
}

/// One import between two files.
struct Arrow {
    from: String,
    line: usize,
    to: String,
    /// The absolute module path named.
    path: Vec<String>,
}

/// Every import of every source, façades left out.
fn arrows(sources: &[Source]) -> Vec<Arrow> {
    let files: BTreeSet<String> = sources.iter().map(|s| s.path.clone()).collect();
    let mut arrows = Vec::new();
    for source in sources {
        let module = module_of(&source.path);
        let kids = children(&source.code);
        let mut roots = vec!["crate", "super", "self"];
        roots.extend(kids.iter().map(String::as_str));
        roots.extend(CRATES.iter().skip(1).map(|(name, _, _)| *name));
        if source.path == "main.rs" {
            roots.push("safewrite");
        }
        for name in named(&source.code, &roots) {
            let Some(path) = absolute(&module, &name.segments) else {
                continue;
            };
            // A re-export of the module's own descendants is its façade.
            if name.reexport && path.len() > module.len() && path.starts_with(&module) {
                continue;
            }
            let to = resolve(&path, &files);
            if to != source.path {
                arrows.push(Arrow {
                    from: source.path.clone(),
                    line: name.line,
                    to,
                    path,
                });
            }
        }
    }
    arrows
}

/// The strongly connected components of more than one node (Tarjan).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(walk: &mut Walk<'a>, v: &'a str) {
        let n = walk.index.len();
        walk.index.insert(v, n);
        walk.low.insert(v, n);
        walk.stack.push(v);
        for w in walk.edges.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !walk.index.contains_key(w) {
                visit(walk, w);
                let low = walk.low[v].min(walk.low[w]);
                walk.low.insert(v, low);
            } else if walk.stack.contains(&w) {
                let low = walk.low[v].min(walk.index[w]);
                walk.low.insert(v, low);
            }
        }
        if walk.low[v] == walk.index[v] {
            let mut component = Vec::new();
            while let Some(w) = walk.stack.pop() {
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                walk.found.push(component);
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v.as_str()) {
            visit(&mut walk, v);
        }
    }
    walk.found.sort();
    walk.found
}

/// The cycles among `arrows`, each with its arrows `file:line -> file`.
fn cycle_report(arrows: &[Arrow]) -> Vec<String> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for arrow in arrows {
        edges
            .entry(arrow.from.clone())
            .or_default()
            .insert(arrow.to.clone());
    }
    let mut report = Vec::new();
    for cycle in cycles(&edges) {
        let mut text = format!("cycle between {}:", cycle.join(", "));
        let mut seen = BTreeSet::new();
        for arrow in arrows {
            if cycle.contains(&arrow.from)
                && cycle.contains(&arrow.to)
                && seen.insert((arrow.from.clone(), arrow.line, arrow.to.clone()))
            {
                text.push_str(&format!(
                    "\n  {}:{} -> {} ({})",
                    real(&arrow.from),
                    arrow.line,
                    real(&arrow.to),
                    arrow.path.join("::")
                ));
            }
        }
        report.push(text);
    }
    report
}

// ---- the declared order --------------------------------------------------------------

/// The floors of the drawing in `layout` (the first ```` ```text ```` block under the
/// `src/` item), top floor first: a line whose text starts within its first four columns
/// starts a floor; the wings it names come before the first run of two spaces, as
/// `name/` (a folder), `name.rs` (a file) or `name` (a module written inside `lib.rs`).
fn floors(layout: &str) -> Result<Vec<Vec<String>>, String> {
    let after = layout
        .split_once("- `src/`")
        .ok_or("docs/layout.md has no `src/` item")?
        .1;
    let block = after
        .split_once("```text\n")
        .ok_or("the `src/` item of docs/layout.md has no ```text drawing")?
        .1;
    let block = block
        .split_once("```")
        .ok_or("the drawing is not closed")?
        .0;
    let mut floors = Vec::new();
    for line in block.lines() {
        let text = line.trim_start();
        let column = line.len() - text.len();
        if text.is_empty() || column >= 4 {
            continue;
        }
        let names = text.split("  ").next().unwrap_or("");
        let wings: Vec<String> = names
            .split([' ', ','])
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect();
        floors.push(wings);
    }
    if floors.is_empty() {
        return Err("the drawing in docs/layout.md names no floor".to_string());
    }
    Ok(floors)
}

/// The wings of the tree: the sidecar's top-level modules, `main`, and the crates below
/// it.
fn crate_wings(lib: &str) -> BTreeSet<String> {
    let mut wings: BTreeSet<String> = lib
        .lines()
        .filter_map(|line| {
            let rest = line
                .strip_prefix("pub mod ")
                .or(line.strip_prefix("mod "))?;
            let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            Some(name)
        })
        .collect();
    wings.insert("main".to_string());
    wings.extend(
        CRATES
            .iter()
            .filter(|(_, _, wing)| !wing.is_empty())
            .map(|(_, _, wing)| wing.to_string()),
    );
    wings
}

/// The floor of each declared wing, and the problems with the declaration itself.
fn declared(
    floors: &[Vec<String>],
    wings: &BTreeSet<String>,
    lib: &str,
    files: &BTreeSet<String>,
) -> (BTreeMap<String, usize>, Vec<String>) {
    let mut floor_of = BTreeMap::new();
    let mut wrong = Vec::new();
    for (floor, names) in floors.iter().enumerate() {
        for written in names {
            let (name, exists) = if let Some(name) = written.strip_suffix('/') {
                (name, files.contains(&format!("{name}/mod.rs")))
            } else if let Some(name) = written.strip_suffix(".rs") {
                (name, files.contains(written))
            } else {
                let inline = format!("mod {written} {{");
                (written.as_str(), lib.lines().any(|l| l.contains(&inline)))
            };
            if !exists || !wings.contains(name) {
                wrong.push(format!(
                    "docs/layout.md declares the wing `{written}`, which the workspace does not have: \
                     remove its line or add the module"
                ));
            }
            if floor_of.insert(name.to_string(), floor).is_some() {
                wrong.push(format!("docs/layout.md declares `{written}` twice"));
            }
        }
    }
    for wing in wings {
        if !floor_of.contains_key(wing) {
            wrong.push(format!(
                "the workspace has the wing `{wing}`, which the drawing in docs/layout.md does not \
                 declare: give it a line on its floor"
            ));
        }
    }
    (floor_of, wrong)
}

/// The arrows that point at the arrow's own floor or one above it.
fn upward(arrows: &[Arrow], floor_of: &BTreeMap<String, usize>) -> Vec<String> {
    let mut wrong = Vec::new();
    for arrow in arrows {
        let (Some(from), Some(to)) = (wing_of(&arrow.from), arrow.path.first()) else {
            continue;
        };
        if from == *to {
            continue;
        }
        let (Some(&f), Some(&t)) = (floor_of.get(&from), floor_of.get(to)) else {
            continue;
        };
        if t <= f {
            let where_ = if t == f {
                "on its own floor"
            } else {
                "above it"
            };
            wrong.push(format!(
                "{}:{}: wing `{from}` imports `{}` of wing `{to}`, declared {where_}",
                real(&arrow.from),
                arrow.line,
                arrow.path.join("::")
            ));
        }
    }
    wrong
}

// ---- sizes ---------------------------------------------------------------------------

/// The lines of code in `code`: not blank, not a comment.
fn lines_of_code(code: &str) -> usize {
    code.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .count()
}

/// Each function of `code` with a body: its name, its `fn` line (1-based) and its length
/// in lines through its closing brace (rustfmt puts that brace at the `fn` line's indent).
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let text = line.trim_start();
        let indent = &line[..line.len() - text.len()];
        let mut rest = text;
        for qualifier in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "const ",
            "async ",
            "unsafe ",
        ] {
            rest = rest.strip_prefix(qualifier).unwrap_or(rest);
        }
        let Some(rest) = rest.strip_prefix("fn ") else {
            continue;
        };
        let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        // The signature ends at the first line ending in `{` (a body) or `;` (none).
        let Some(open) = (i..lines.len()).find(|&j| {
            let l = lines[j].trim_end();
            l.ends_with('{') || l.ends_with(';') || l.ends_with('}')
        }) else {
            continue;
        };
        let opened = lines[open].trim_end();
        if opened.ends_with(';') {
            continue;
        }
        let close = if opened.ends_with('}') {
            open
        } else {
            let closing = format!("{indent}}}");
            match (open + 1..lines.len()).find(|&j| lines[j].trim_end() == closing) {
                Some(close) => close,
                None => continue,
            }
        };
        found.push((name, i + 1, close - i + 1));
    }
    found
}

// ---- the checks ----------------------------------------------------------------------

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("read {path}: {e}"))
}

#[test]
fn the_wings_keep_the_declared_order() {
    let lib = read("src/lib.rs");
    let floors = floors(&read("docs/layout.md")).unwrap_or_else(|e| panic!("{e}"));
    let wings = crate_wings(&lib);
    assert!(wings.len() > 10, "found only {wings:?}");
    let sources = sources();
    let files: BTreeSet<String> = sources.iter().map(|s| s.path.clone()).collect();
    let (floor_of, mut wrong) = declared(&floors, &wings, &lib, &files);
    let arrows = arrows(&sources);
    wrong.extend(upward(&arrows, &floor_of));
    assert!(
        wrong.is_empty(),
        "the wings break the order drawn in docs/layout.md (top floor first; a wing \
         imports only from the floors below it):\n{}",
        wrong.join("\n")
    );
    eprintln!(
        "{} wings on {} floors, {} imports between files, all downward",
        wings.len(),
        floors.len(),
        arrows.len()
    );
}

#[test]
fn no_import_cycle_between_any_two_files() {
    let sources = sources();
    assert!(sources.len() > 30, "found only {} files", sources.len());
    let arrows = arrows(&sources);
    let report = cycle_report(&arrows);
    assert!(
        report.is_empty(),
        "{} import cycles between files of the workspace (move what both sides need into a file \
         of its own below them):\n{}",
        report.len(),
        report.join("\n")
    );
    eprintln!(
        "{} files, {} imports between them, no cycle",
        sources.len(),
        arrows.len()
    );
}

#[test]
fn no_file_is_over_400_lines_of_code() {
    let mut sized: Vec<(usize, String)> = sources()
        .iter()
        .map(|s| (lines_of_code(&s.code), s.path.clone()))
        .collect();
    sized.sort();
    let over: Vec<String> = sized
        .iter()
        .filter(|(lines, _)| *lines > MAX_LINES)
        .map(|(lines, path)| {
            format!(
                "{}: {lines} lines of code, over {MAX_LINES}: split it",
                real(path)
            )
        })
        .collect();
    let (lines, path) = sized.last().expect("a file");
    eprintln!(
        "the largest file, {}, has {lines} lines of code",
        real(path)
    );
    assert!(over.is_empty(), "{}", over.join("\n"));
}

#[test]
fn no_function_is_over_80_lines() {
    let mut all: Vec<(usize, String)> = Vec::new();
    for source in sources() {
        for (name, line, length) in functions(&source.code) {
            all.push((length, format!("{}:{line} fn {name}", real(&source.path))));
        }
    }
    all.sort_by(|a, b| b.cmp(a));
    let over: Vec<String> = all
        .iter()
        .filter(|(length, _)| *length > MAX_FN_LINES)
        .map(|(length, at)| {
            format!("{at}: {length} lines, over {MAX_FN_LINES}: split it into named steps")
        })
        .collect();
    eprintln!("the five longest functions:");
    for (length, at) in all.iter().take(5) {
        eprintln!("  {at}: {length} lines");
    }
    assert!(over.is_empty(), "{}", over.join("\n"));
}

/// The types `code` defines as items of its module (`struct`, `enum`, `trait` at any
/// visibility, at the start of a line), each with its line. An associated type, a type
/// alias or a type local to a function is no name the wing gives.
fn type_names(code: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    for (number, line) in code.lines().enumerate() {
        if line.starts_with(char::is_whitespace) {
            continue;
        }
        let mut words = line.split_whitespace().skip_while(|w| w.starts_with("pub"));
        if let (Some("struct" | "enum" | "trait"), Some(name)) = (words.next(), words.next()) {
            let name: String = name.chars().take_while(|&c| is_ident(c)).collect();
            if name.starts_with(|c: char| c.is_ascii_uppercase()) {
                found.push((name, number + 1));
            }
        }
    }
    found
}

#[test]
fn no_two_wings_name_a_type_alike() {
    let mut defined: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for source in sources() {
        let Some(wing) = wing_of(&source.path) else {
            continue;
        };
        for (name, line) in type_names(&source.code) {
            defined
                .entry(name)
                .or_default()
                .entry(wing.clone())
                .or_insert_with(|| format!("{}:{line}", real(&source.path)));
        }
    }
    let clashes: Vec<String> = defined
        .iter()
        .filter(|(_, wings)| wings.len() > 1)
        .map(|(name, wings)| {
            let places: Vec<&str> = wings.values().map(String::as_str).collect();
            format!("`{name}` names a type in {}", places.join(" and "))
        })
        .collect();
    assert!(
        clashes.is_empty(),
        "two wings define a type of one name (rename one to say what it is):\n{}",
        clashes.join("\n")
    );
}

/// The type an `impl` line is for (`impl<T> Trait for Type<T> {` is for `Type`).
fn impl_type(line: &str) -> Option<String> {
    let rest = line.strip_prefix("impl")?;
    let rest = if rest.starts_with('<') {
        // Past the generics (no `>` inside a bound's generics here, or a `for` follows).
        let mut depth = 0;
        let end = rest.char_indices().find(|&(_, c)| {
            depth += match c {
                '<' => 1,
                '>' => -1,
                _ => 0,
            };
            depth == 0
        })?;
        &rest[end.0 + 1..]
    } else {
        rest
    };
    let rest = rest
        .split_once(" for ")
        .map_or(rest, |(_, after)| after)
        .trim_start();
    let rest = rest.strip_prefix("dyn ").unwrap_or(rest);
    let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
    (!name.is_empty()).then_some(name)
}

/// The `impl` lines of `code` that start a run of one type's impls without a
/// `// === impl Type ===` marker above them (their attributes and doc comments aside).
fn unmarked_impls(code: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut unmarked = Vec::new();
    let mut run: Option<String> = None;
    for (i, line) in lines.iter().enumerate() {
        if let Some(name) = impl_type(line) {
            if run.as_deref() != Some(name.as_str()) {
                let mut j = i;
                while j > 0 && (lines[j - 1].starts_with("#[") || lines[j - 1].starts_with("///")) {
                    j -= 1;
                }
                let marked = j >= 2 && lines[j - 2].starts_with("// === impl ");
                if !marked {
                    unmarked.push((name.clone(), i + 1));
                }
            }
            run = Some(name);
        } else if !line.is_empty() && !line.starts_with([' ', '}', '#']) && !line.starts_with("//")
        {
            run = None;
        }
    }
    unmarked
}

#[test]
fn files_over_200_lines_mark_each_types_impls() {
    let mut wrong = Vec::new();
    for source in sources() {
        if source.code.lines().count() <= 200 {
            continue;
        }
        for (name, line) in unmarked_impls(&source.code) {
            wrong.push(format!(
                "{}:{line}: `impl {name}` has no `// === impl {name} ===` above it",
                real(&source.path)
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "a file over 200 lines marks each type's impls, as tower and kubert do:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_checks_see_what_they_check() {
    // Types a module defines, whatever their visibility; not a field, an alias, an
    // associated type or a type local to a function.
    let types = type_names(
        "pub(crate) struct Reply {\n    kind: Kind,\n}\nenum Step<'a> {}\nlet struct_ = 1;\n\
         type Alias = u8;\nimpl S {\n    type Error = E;\n}\nfn f() {\n    struct Local;\n}\n",
    );
    let names: Vec<&str> = types.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["Reply", "Step"]);
    // An import of each form.
    let code = "use crate::{a, b::{c, self}};\nfn f() { crate::d::e(); }\n/// [`crate::f`]\n\
                use super::super::g::*;\nuse self::kid::K;\nfn h() { other_crate::x(); }\n";
    let found = named(code, &["crate", "super", "self"]);
    let found: Vec<(usize, Vec<&str>)> = found
        .iter()
        .map(|n| (n.line, n.segments.iter().map(String::as_str).collect()))
        .collect();
    assert_eq!(
        found,
        [
            (1, vec!["crate", "a"]),
            (1, vec!["crate", "b", "c"]),
            (1, vec!["crate", "b"]),
            (2, vec!["crate", "d", "e"]),
            (3, vec!["crate", "f"]),
            (4, vec!["super", "super", "g"]),
            (5, vec!["self", "kid", "K"]),
        ]
    );
    // super:: resolves against the file's module; `use super::*` imports the parent's file.
    let files: BTreeSet<String> = ["client/mod.rs", "client/timeout/mod.rs", "client/answer.rs"]
        .map(String::from)
        .into();
    let module = module_of("client/timeout/layer.rs");
    let parent = absolute(&module, &["super".into(), "Timeout".into()]).unwrap();
    assert_eq!(resolve(&parent, &files), "client/timeout/mod.rs");
    let up = absolute(&module, &["super".into(), "super".into(), "answer".into()]).unwrap();
    assert_eq!(resolve(&up, &files), "client/answer.rs");
    let all = absolute(&module_of("client/answer.rs"), &["super".into()]).unwrap();
    assert_eq!(resolve(&all, &files), "client/mod.rs");
    // A façade is not an arrow; a private import of a child, or a re-export of
    // something elsewhere, is.
    let facade = Source {
        path: "timeout/mod.rs".into(),
        code: "mod layer;\npub use layer::{\n    Layer,\n};\nuse crate::other::X;\n".into(),
    };
    let layer = Source {
        path: "timeout/layer.rs".into(),
        code: "use super::Timeout;\n".into(),
    };
    let other = Source {
        path: "other.rs".into(),
        code: "pub use crate::timeout::Layer;\n".into(),
    };
    let arrows = arrows(&[facade, layer, other]);
    let drawn: Vec<String> = arrows
        .iter()
        .map(|a| format!("{}:{} -> {}", a.from, a.line, a.to))
        .collect();
    assert_eq!(
        drawn,
        [
            "timeout/mod.rs:5 -> other.rs",
            "timeout/layer.rs:1 -> timeout/mod.rs",
            "other.rs:1 -> timeout/mod.rs",
        ]
    );
    assert_eq!(
        cycle_report(&arrows),
        [
            "cycle between other.rs, timeout/mod.rs:\n  src/timeout/mod.rs:5 -> src/other.rs \
          (other::X)\n  src/other.rs:1 -> src/timeout/mod.rs (timeout::Layer)"
        ]
    );
    // A cycle of three is found, the tail left out.
    let edges: BTreeMap<String, BTreeSet<String>> =
        [("x", "y"), ("y", "z"), ("z", "x"), ("z", "w")]
            .iter()
            .fold(BTreeMap::new(), |mut edges, (from, to)| {
                edges
                    .entry(from.to_string())
                    .or_insert_with(BTreeSet::new)
                    .insert(to.to_string());
                edges
            });
    assert_eq!(cycles(&edges), [["x", "y", "z"]]);
    // The drawing's floors, and an arrow up or sideways.
    let layout = "- `src/`:\n\n  ```text\n  main.rs   top\n   cli/     the cli,\n            \
                  more/ prose\n   a.rs, b/  leaves\n  ```\n";
    assert_eq!(
        floors(layout).unwrap(),
        [vec!["main.rs"], vec!["cli/"], vec!["a.rs", "b/"]]
    );
    let floor_of: BTreeMap<String, usize> = [("cli", 0), ("a", 1), ("b", 1)]
        .map(|(w, f)| (w.to_string(), f))
        .into();
    let arrow = |from: &str, to: &str| Arrow {
        from: from.into(),
        line: 7,
        to: String::new(),
        path: vec![to.into(), "X".into()],
    };
    let wrong = upward(
        &[
            arrow("cli/mod.rs", "a"),
            arrow("a.rs", "b"),
            arrow("b/mod.rs", "cli"),
        ],
        &floor_of,
    );
    assert_eq!(
        wrong,
        [
            "src/a.rs:7: wing `a` imports `b::X` of wing `b`, declared on its own floor",
            "src/b/mod.rs:7: wing `b` imports `cli::X` of wing `cli`, declared above it",
        ]
    );
    // Counting skips blanks and comments; a function runs to its closing brace.
    assert_eq!(
        lines_of_code("//! doc\n\n/// f\nfn f() {\n    // why\n    g();\n}\n"),
        3
    );
    let code = "impl A {\n    pub async fn f(\n        x: u8,\n    ) -> u8 {\n        x\n    }\n\
                \n    fn g();\n    fn h() {}\n}\n";
    assert_eq!(
        functions(code),
        [("f".to_string(), 2, 5), ("h".to_string(), 9, 1)]
    );
    // Test code is left out: inline test modules and files declared as tests.
    // Each type's run of impls is marked; an unmarked one is found.
    assert_eq!(
        impl_type("impl<S: Clone> tower::Layer<S> for Edge<S> {"),
        Some("Edge".into())
    );
    assert_eq!(impl_type("impl Memory {"), Some("Memory".into()));
    let code = "// === impl A ===\n\nimpl A {}\nimpl Drop for A {}\n\n/// B.\nimpl B {}\n";
    assert_eq!(unmarked_impls(code), [("B".to_string(), 7)]);
    let text = "fn a() {}\n#[cfg(test)]\nmod tests {\n    use crate::x;\n}\n";
    assert_eq!(without_tests(text), "fn a() {}");
    assert_eq!(
        test_files("engine/mod.rs", "#[cfg(test)]\nmod tests;\n"),
        ["engine/tests.rs", "engine/tests/mod.rs"]
    );
    assert_eq!(
        test_files("cel.rs", "#[cfg(test)]\nmod tests;\n"),
        ["cel/tests.rs", "cel/tests/mod.rs"]
    );
}
