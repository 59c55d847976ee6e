//! The house's floors, checked from the source text: no import cycle between the
//! top-level modules of `src/` (a cycle inside one module's folder is its own business),
//! and no file over 500 lines of code that is not test code.
//!
//! An import is any `crate::name` path (a `use`, a path in code or a doc link) and any
//! `crate::{name, ...}` group. Test code is an inline `#[cfg(test)] mod ... {` to the end
//! of its file (the convention here: the tests come last) and every file declared as a
//! `#[cfg(test)] mod name;`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The most lines of code (not test code) in one file.
const MAX_LINES: usize = 500;

struct Source {
    /// The path under `src/`, with `/` separators.
    path: String,
    /// The top-level module it belongs to.
    module: String,
    /// Its code, without its tests.
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

/// The files declared by `text` (the file at `path`) as `#[cfg(test)] mod name;`.
fn test_files(path: &str, text: &str) -> Vec<String> {
    // A module's children sit beside a mod.rs (and lib.rs, main.rs), else in a folder
    // named after the file.
    let dir = if path == "lib.rs" || path == "main.rs" || path == "mod.rs" {
        String::new()
    } else if let Some(parent) = path.strip_suffix("/mod.rs") {
        format!("{parent}/")
    } else {
        format!("{}/", path.trim_end_matches(".rs"))
    };
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

fn sources() -> Vec<Source> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    files(&src, &mut paths);
    let mut texts = BTreeMap::new();
    for path in paths {
        let name = path
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        texts.insert(
            name,
            std::fs::read_to_string(&path).expect("read a source file"),
        );
    }
    let tests: BTreeSet<String> = texts
        .iter()
        .flat_map(|(path, text)| test_files(path, text))
        .collect();
    texts
        .into_iter()
        .filter(|(path, _)| !tests.contains(path))
        .map(|(path, text)| Source {
            module: path
                .split('/')
                .next()
                .unwrap()
                .trim_end_matches(".rs")
                .to_string(),
            code: without_tests(&text),
            path,
        })
        .collect()
}

/// The top-level modules `code` names through `crate::`.
fn imports(code: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        if at > 0 && code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `safewrite_crate::`
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                named.insert(name);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            named.insert(name);
        }
    }
    named
}

/// The strongly connected components of more than one module (Tarjan).
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
    walk.found
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    let sources = sources();
    let modules: BTreeSet<String> = sources
        .iter()
        .map(|s| s.module.clone())
        .filter(|m| m != "lib" && m != "main")
        .collect();
    assert!(modules.len() > 10, "found only {modules:?}");
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut by: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for source in sources.iter().filter(|s| modules.contains(&s.module)) {
        for name in imports(&source.code) {
            if modules.contains(&name) && name != source.module {
                edges
                    .entry(source.module.clone())
                    .or_default()
                    .insert(name.clone());
                by.entry((source.module.clone(), name))
                    .or_default()
                    .insert(source.path.clone());
            }
        }
    }
    let found = cycles(&edges);
    let mut report = String::new();
    for cycle in &found {
        report.push_str(&format!("cycle: {}\n", cycle.join(", ")));
        for ((from, to), paths) in &by {
            if cycle.contains(from) && cycle.contains(to) {
                report.push_str(&format!("  {from} -> {to}: {paths:?}\n"));
            }
        }
    }
    assert!(found.is_empty(), "import cycles in src/:\n{report}");
    eprintln!(
        "{} top-level modules, {} arrows between them, no cycle",
        modules.len(),
        edges.values().map(BTreeSet::len).sum::<usize>()
    );
}

#[test]
fn no_file_is_over_500_lines_of_code() {
    let (mut over, mut largest) = (Vec::new(), (0, String::new()));
    for source in sources() {
        let lines = source.code.lines().count();
        largest = largest.max((lines, source.path.clone()));
        if lines > MAX_LINES {
            over.push(format!(
                "{}: {lines} lines of code, over {MAX_LINES}: split it",
                source.path
            ));
        }
    }
    assert!(over.is_empty(), "{}", over.join("\n"));
    eprintln!(
        "the largest file, {}, has {} lines of code",
        largest.1, largest.0
    );
}

#[test]
fn the_checks_see_what_they_check() {
    // An import of each form, and a cycle of three.
    let code = "use crate::{a, b::c};\nfn f() { crate::d::e(); }\n/// [`crate::f`]\n";
    let named: Vec<String> = imports(code).into_iter().collect();
    assert_eq!(named, ["a", "b", "d", "f"]);
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
    // Test code is left out: inline test modules and files declared as tests.
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
