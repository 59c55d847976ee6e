//! The documentation, checked against the code and against itself:
//!
//! - the pages generated from the code (`docs/serve-flags.md` from clap's definitions of
//!   `safewrite serve`, `docs/metrics.md` from the metrics registry) match what the code
//!   generates now; `SAFEWRITE_BLESS=1 cargo test --test docs` rewrites them;
//! - every relative link and `#anchor` in the repository's Markdown pages (README.md,
//!   docs/, the clients' READMEs, ...) names a file that exists and a heading it has,
//!   with GitHub's rules for heading anchors;
//! - README.md is a front page: the two commands first, at most 200 lines, a link to
//!   every page under docs/;
//! - README.md's supported Kubernetes range is the version matrix's
//!   (tests/harness/versions.env), which docs/versions.md lists in full.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use clap::Args as _;

use safewrite::runtime::config::ServeArgs;
use safewrite::telemetry::LogArgs;

/// How to bring a generated page up to date, quoted by every failure.
const BLESS: &str = "SAFEWRITE_BLESS=1 cargo test --test docs";

/// The most lines README.md may have: a front page, the rest lives under docs/.
const README_MAX_LINES: usize = 200;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

// ---------------------------------------------------------------------------------------
// Generated pages
// ---------------------------------------------------------------------------------------

/// `docs/serve-flags.md`: every option of `safewrite serve`, from its clap definition.
fn serve_flags_page() -> String {
    let command = LogArgs::augment_args(ServeArgs::augment_args(clap::Command::new("serve")));
    let mut page = String::from(
        "# `safewrite serve` flags\n\n\
         <!-- Generated from the code (src/runtime/config.rs, crates/client/src/connect.rs, \
         src/telemetry.rs) by tests/docs.rs: do not edit by hand; run \
         `SAFEWRITE_BLESS=1 cargo test --test docs` after changing a flag. -->\n\n\
         Every flag can also be set from the environment variable beside it; a flag wins \
         over the environment. Durations are written like `10ms`, `1s`, `5m`. The same \
         text is what `safewrite serve --help` prints. What the flags are for: \
         [deployment](deployment.md), [the API-server client stack](client-stack.md), \
         [policy and authentication](security.md), [observability](observability.md).\n\n\
         | flag | env | default | meaning |\n|---|---|---|---|\n",
    );
    for arg in command.get_arguments() {
        if arg.is_hide_set() {
            continue;
        }
        let Some(long) = arg.get_long() else { continue };
        let takes_values = arg.get_action().takes_values();
        let flag = format!("`--{long}`");
        let env = arg
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let mut meaning = help.split_whitespace().collect::<Vec<_>>().join(" ");
        // A default the code applies itself is written in the help as `[default: X]`.
        let stated = meaning.find(" [default: ").and_then(|at| {
            let end = at + meaning[at..].find(']')?;
            let value = meaning[at + " [default: ".len()..end].to_string();
            meaning.replace_range(at..=end, "");
            Some(value)
        });
        let default = if !takes_values {
            "off (a switch)".to_string()
        } else if let Some(value) = stated {
            format!("`{value}`")
        } else if defaults.is_empty() {
            "none".to_string()
        } else {
            format!("`{}`", defaults.join(" "))
        };
        if !meaning.is_empty() && !meaning.ends_with('.') {
            meaning.push('.');
        }
        let values: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        if takes_values && !values.is_empty() && !is_bool(&values) {
            meaning.push_str(&format!(" One of {}.", values.join(", ")));
        }
        page.push_str(&format!(
            "| {flag} | {env} | {default} | {} |\n",
            cell(&meaning)
        ));
    }
    page
}

fn is_bool(values: &[String]) -> bool {
    values.len() == 2 && values.iter().all(|v| v == "`true`" || v == "`false`")
}

/// Text safe inside a table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// One metric family as the registry renders it.
#[derive(Default)]
struct Family {
    kind: String,
    unit: String,
    help: String,
    /// The name of its samples (`_total` for counters, `_info` for info metrics).
    series: String,
    /// Its label names, in the order the code gives them.
    labels: Vec<String>,
}

/// `docs/metrics.md`: every metric of the registry behind `GET /metrics`, with its type,
/// labels and help, read from the registry's own rendering after one value of each has
/// been recorded (so that the labels of labelled families show).
fn metrics_page() -> String {
    use std::time::Duration;
    let metrics = safewrite::metrics::Metrics::new();
    let tick = Duration::from_millis(1);
    metrics.rpc_done("UpdateWithRetry", "main", tonic::Code::Ok, None, 1, tick);
    metrics.outcome("updated", "main");
    let engine = metrics.engine();
    engine.batch(1);
    engine.conflict();
    engine.memory(true);
    engine.memory_stale();
    let client = metrics.client();
    client.api_request(
        "get",
        safewrite_client::metrics::RequestCode::Http(200),
        tick,
    );
    client.breaker(safewrite_client::metrics::BreakerState::Closed);
    client.ratelimit_wait(tick);
    drop(metrics.in_flight());
    metrics.large_answer(true);
    metrics.sending(0);
    metrics.leadership("default/docs", true);
    metrics.leadership("default/docs", false);
    metrics.fence_refused("fenced");
    let text = metrics.render();

    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (Some(what), Some(name)) = (parts.next(), parts.next()) else {
                continue;
            };
            let value = parts.next().unwrap_or("").to_string();
            if !families.contains_key(name) {
                order.push(name.to_string());
            }
            let family = families.entry(name.to_string()).or_default();
            match what {
                "TYPE" => family.kind = value,
                "HELP" => family.help = value,
                "UNIT" => family.unit = value,
                _ => {}
            }
            continue;
        }
        let (series, labels) = match line.split_once('{') {
            Some((series, rest)) => (series, rest.split_once('}').map_or("", |(l, _)| l)),
            None => (line.split(' ').next().unwrap_or(""), ""),
        };
        let Some(name) = order
            .iter()
            .filter(|name| series.starts_with(name.as_str()))
            .max_by_key(|name| name.len())
        else {
            continue;
        };
        let family = families.get_mut(name).expect("a family for every name");
        let suffix = &series[name.len()..];
        if family.series.is_empty() && ["", "_total", "_info"].contains(&suffix) {
            family.series = series.to_string();
        }
        for pair in split_labels(labels) {
            if pair != "le" && !family.labels.contains(&pair) {
                family.labels.push(pair);
            }
        }
    }

    let mut page = String::from(
        "# Metrics\n\n\
         <!-- Generated from the metrics registry (src/metrics/mod.rs, crates/engine/src/metrics.rs, crates/client/src/metrics.rs, src/process.rs) by \
         tests/docs.rs: do not edit by hand; run \
         `SAFEWRITE_BLESS=1 cargo test --test docs` after changing a metric. -->\n\n\
         Served as `GET /metrics` on `--metrics-listen` (default `127.0.0.1:9464`) in the \
         OpenMetrics text format. What the labels' values mean: \
         [observability](observability.md#metrics).\n\n\
         | metric | type | labels | help |\n|---|---|---|---|\n",
    );
    for name in &order {
        let family = &families[name];
        let series = match (family.series.as_str(), family.kind.as_str()) {
            ("", "counter") => format!("{name}_total"),
            ("", "info") => format!("{name}_info"),
            ("", _) => name.clone(),
            (series, _) => series.to_string(),
        };
        let labels = family
            .labels
            .iter()
            .map(|l| format!("`{l}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let kind = if family.unit.is_empty() {
            family.kind.clone()
        } else {
            format!("{} ({})", family.kind, family.unit)
        };
        page.push_str(&format!(
            "| `{series}` | {kind} | {labels} | {} |\n",
            cell(&family.help)
        ));
    }
    page
}

/// The label names of `a="x",b="y,z"`.
fn split_labels(labels: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = labels;
    while let Some((name, after)) = rest.split_once("=\"") {
        names.push(name.trim_start_matches(',').trim().to_string());
        // Skip the quoted value, honouring escapes.
        let mut escaped = false;
        let mut end = after.len();
        for (i, c) in after.char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => {
                    end = i + 1;
                    break;
                }
                _ => escaped = false,
            }
        }
        rest = &after[end..];
    }
    names
}

/// Compares `page` with the file at `relative`, rewriting it under `SAFEWRITE_BLESS=1`.
fn check_generated(relative: &str, page: &str) {
    let path = root().join(relative);
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    if current == page {
        return;
    }
    if std::env::var_os("SAFEWRITE_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, page).unwrap_or_else(|e| panic!("writing {relative}: {e}"));
        eprintln!("rewrote {relative}");
        return;
    }
    panic!(
        "{relative} is out of date with the code it is generated from \
         (- the page, + the code):\n{}\nrun `{BLESS}` to rewrite it, and commit the result",
        diff(&current, page)
    );
}

/// The lines that differ between `old` and `new`, as `-`/`+` lines (a longest common
/// subsequence of lines), each with its line number in its own text.
fn diff(old: &str, new: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push_str(&format!("{:>4} - {}\n", i + 1, a[i]));
            i += 1;
        } else {
            out.push_str(&format!("{:>4} + {}\n", j + 1, b[j]));
            j += 1;
        }
    }
    out
}

#[test]
fn serve_flags_page_matches_the_code() {
    check_generated("docs/serve-flags.md", &serve_flags_page());
}

#[test]
fn metrics_page_matches_the_registry() {
    check_generated("docs/metrics.md", &metrics_page());
}

#[test]
fn the_diff_names_changed_lines() {
    let out = diff("a\nb\nc\n", "a\nB\nc\nd\n");
    assert!(out.contains("- b"), "{out}");
    assert!(out.contains("+ B"), "{out}");
    assert!(out.contains("+ d"), "{out}");
    assert!(!out.contains(" a\n"), "{out}");
}

// ---------------------------------------------------------------------------------------
// Links
// ---------------------------------------------------------------------------------------

/// Directories never searched for pages: build output, dependencies, tool state.
const SKIPPED_DIRS: &[&str] = &[
    "target",
    "node_modules",
    "vendor",
    "dist",
    "build",
    "site-packages",
    "venv",
];

/// Every Markdown page of the repository, relative to its root.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !name.starts_with('.') && !SKIPPED_DIRS.contains(&name.as_str()) {
                    walk(&path, found);
                }
            } else if name.ends_with(".md") {
                found.push(path);
            }
        }
    }
    let root = root();
    let mut found = Vec::new();
    walk(&root, &mut found);
    let mut pages: Vec<PathBuf> = found
        .into_iter()
        .map(|p| p.strip_prefix(&root).expect("under the root").to_path_buf())
        .collect();
    pages.sort();
    pages
}

/// The page's lines outside fenced code blocks, with their numbers (from 1) and inline
/// code spans blanked out.
fn prose_lines(text: &str) -> Vec<(usize, String)> {
    let mut fence: Option<String> = None;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker: String = trimmed
            .chars()
            .take_while(|c| *c == '`' || *c == '~')
            .collect();
        if marker.len() >= 3 && marker.chars().all(|c| c == marker.chars().next().unwrap()) {
            match &fence {
                None => fence = Some(marker),
                Some(open) if marker.starts_with(open.as_str()) => fence = None,
                Some(_) => {}
            }
            continue;
        }
        if fence.is_none() {
            lines.push((i + 1, blank_code_spans(line)));
        }
    }
    lines
}

/// `line` with the contents of its inline code spans replaced by spaces.
fn blank_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|c| **c == '`').count();
        // The closing run of the same length.
        let mut j = i + run;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let len = chars[j..].iter().take_while(|c| **c == '`').count();
                if len == run {
                    close = Some(j);
                    break;
                }
                j += len;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                out.push('`');
                out.extend(std::iter::repeat_n(' ', j - i - run));
                out.push('`');
                i = j + run;
            }
            None => {
                out.extend(&chars[i..i + run]);
                i += run;
            }
        }
    }
    out
}

/// The link targets of a line: inline links and images `[text](target "title")` and
/// reference definitions `[name]: target`.
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let trimmed = line.trim_start();
    if trimmed.starts_with('[')
        && let Some(end) = trimmed.find("]:")
    {
        if let Some(target) = trimmed[end + 2..].split_whitespace().next() {
            targets.push(target.trim_matches(['<', '>']).to_string());
        }
        return targets;
    }
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        let inner = after[..end].trim();
        let target = inner.split_whitespace().next().unwrap_or("");
        if !target.is_empty() {
            targets.push(target.trim_matches(['<', '>']).to_string());
        }
        rest = &after[end..];
    }
    targets
}

/// The anchor GitHub gives a heading: the text lower-cased, without the Markdown markup
/// and punctuation (letters, digits, `-`, `_` and spaces stay), spaces turned to `-`.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // [text](url) keeps only its text.
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page: its headings' slugs (a repeated one gets `-1`, `-2`, ...) and
/// explicit `id="..."` / `name="..."` of HTML anchors.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut fence: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let marker: String = trimmed
            .chars()
            .take_while(|c| *c == '`' || *c == '~')
            .collect();
        if marker.len() >= 3 {
            match &fence {
                None => fence = Some(marker),
                Some(open) if marker.starts_with(open.as_str()) => fence = None,
                Some(_) => {}
            }
            continue;
        }
        if fence.is_some() {
            continue;
        }
        for attribute in ["id=\"", "name=\""] {
            let mut rest = line;
            while let Some(at) = rest.find(attribute) {
                let after = &rest[at + attribute.len()..];
                if let Some(end) = after.find('"') {
                    found.insert(after[..end].to_string());
                }
                rest = after;
            }
        }
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !trimmed[hashes..].starts_with(' ') {
            continue;
        }
        let heading = trimmed[hashes..].trim().trim_end_matches('#').trim();
        let base = slug(heading);
        let n = seen.entry(base.clone()).or_insert(0);
        let anchor = if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        };
        *n += 1;
        found.insert(anchor);
    }
    found
}

/// `%20` and friends decoded.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `base/relative` with `.` and `..` resolved, or None when it leaves the repository.
fn join(base: &Path, relative: &str) -> Option<PathBuf> {
    let mut parts: Vec<Component> = base.components().collect();
    for component in Path::new(relative).components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(_) => parts.push(component),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

/// What is wrong with each broken link of `page` (relative to the root), as
/// `page:line: link "target": why`.
fn broken_links(root: &Path, page: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(root.join(page)).expect("a page");
    let dir = page.parent().unwrap_or(Path::new(""));
    let mut broken = Vec::new();
    for (line, prose) in prose_lines(&text) {
        for target in link_targets(&prose) {
            let scheme = target.split_once(':').is_some_and(|(s, _)| {
                !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
            });
            if scheme || target.starts_with("//") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let where_ = format!("{}:{line}: link \"{target}\"", page.display());
            let file = if path.is_empty() {
                page.to_path_buf()
            } else {
                match join(dir, &percent_decode(path)) {
                    Some(file) => file,
                    None => {
                        broken.push(format!("{where_}: leaves the repository"));
                        continue;
                    }
                }
            };
            if !root.join(&file).exists() {
                broken.push(format!("{where_}: no file {}", file.display()));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if anchor.is_empty() || file.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let target_text = std::fs::read_to_string(root.join(&file)).unwrap_or_default();
            let anchor = percent_decode(anchor);
            if !anchors(&target_text).contains(&anchor) {
                broken.push(format!(
                    "{where_}: {} has no heading with the anchor #{anchor}",
                    file.display()
                ));
            }
        }
    }
    broken
}

#[test]
fn every_link_in_the_docs_resolves() {
    let root = root();
    let pages = pages();
    assert!(
        pages.iter().any(|p| p == Path::new("README.md")),
        "README.md not found among {pages:?}"
    );
    let broken: Vec<String> = pages
        .iter()
        .flat_map(|page| broken_links(&root, page))
        .collect();
    assert!(
        broken.is_empty(),
        "{} broken link(s) in the Markdown pages (a relative link must name a file of the \
         repository, an anchor a heading of that page, as GitHub makes it):\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn slugs_follow_github() {
    assert_eq!(slug("What safewrite is"), "what-safewrite-is");
    assert_eq!(
        slug("From the shell: `safewrite update`"),
        "from-the-shell-safewrite-update"
    );
    assert_eq!(
        slug("Linearizability: every answer fits one serial order"),
        "linearizability-every-answer-fits-one-serial-order"
    );
    assert_eq!(
        slug("Deadlines, cancellation, unix sockets, tokens"),
        "deadlines-cancellation-unix-sockets-tokens"
    );
    assert_eq!(slug("A [linked](x.md) `snake_case`"), "a-linked-snake_case");
    assert_eq!(slug("Group commit — one read"), "group-commit--one-read");
    let page = "# A\n## B\n```\n# not a heading\n```\n## B\n<a id=\"here\"></a>\n";
    let found = anchors(page);
    for anchor in ["a", "b", "b-1", "here"] {
        assert!(found.contains(anchor), "{anchor} missing from {found:?}");
    }
    assert!(!found.contains("not-a-heading"));
}

#[test]
fn broken_links_are_named_with_their_line() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::create_dir(dir.path().join("docs")).expect("docs/");
    std::fs::write(dir.path().join("docs/a.md"), "# Title\n\n## Part two\n").expect("a.md");
    std::fs::write(
        dir.path().join("README.md"),
        "# R\n\n[ok](docs/a.md#part-two) [gone](docs/b.md)\n\
         `[not](a-link.md)`\n\n```\n[nor](this.md)\n```\n[bad](docs/a.md#part-three) [self](#r)\n\
         [web](https://example.invalid/x.md)\n",
    )
    .expect("README.md");
    let broken = broken_links(dir.path(), Path::new("README.md"));
    assert_eq!(broken.len(), 2, "{broken:#?}");
    assert!(broken[0].starts_with("README.md:3: link \"docs/b.md\": no file"));
    assert!(broken[1].starts_with("README.md:9: link \"docs/a.md#part-three\""));
}

// ---------------------------------------------------------------------------------------
// The front page
// ---------------------------------------------------------------------------------------

#[test]
fn readme_is_a_front_page_over_docs() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let lines: Vec<&str> = readme.lines().collect();
    assert!(
        lines.len() <= README_MAX_LINES,
        "README.md has {} lines; it is a front page of at most {README_MAX_LINES}: move the \
         detail to a page under docs/ and link it",
        lines.len()
    );
    // The title, then the two commands (CI runs the second, tests/run-all.sh).
    assert_eq!(
        lines.first(),
        Some(&"# safewrite"),
        "README.md's first line"
    );
    let block: Vec<&str> = lines
        .iter()
        .skip_while(|l| !l.starts_with("```sh"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .copied()
        .collect();
    let commands: Vec<&str> = block
        .iter()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        commands,
        ["bash deploy/local/demo.sh", "bash tests/run-all.sh"],
        "README.md's first sh block must hold exactly the demo and the test command"
    );
    // Every page under docs/ is on the map.
    let linked: BTreeSet<String> = prose_lines(&readme)
        .iter()
        .flat_map(|(_, line)| link_targets(line))
        .map(|t| t.split('#').next().unwrap_or("").to_string())
        .collect();
    let unlinked: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| format!("docs/{}", e.file_name().to_string_lossy()))
        .filter(|p| p.ends_with(".md") && !linked.contains(p))
        .collect();
    assert!(
        unlinked.is_empty(),
        "pages under docs/ that README.md's map does not link: {unlinked:?}"
    );
}

// ---------------------------------------------------------------------------------------
// The version matrix

/// `KUBERNETES_MATRIX` of tests/harness/versions.env: (Kubernetes, etcd) pairs.
fn matrix() -> Vec<(String, String)> {
    let env = std::fs::read_to_string(root().join("tests/harness/versions.env"))
        .expect("tests/harness/versions.env");
    let line = env
        .lines()
        .find_map(|l| l.strip_prefix("KUBERNETES_MATRIX="))
        .expect("KUBERNETES_MATRIX in tests/harness/versions.env");
    line.trim_matches('"')
        .split_whitespace()
        .map(|entry| {
            let (k8s, etcd) = entry.split_once('=').expect("an entry is vK=vETCD");
            (k8s.to_string(), etcd.to_string())
        })
        .collect()
}

/// "1.35" of "v1.35.4".
fn minor_of(version: &str) -> String {
    let parts: Vec<&str> = version.trim_start_matches('v').split('.').collect();
    format!("{}.{}", parts[0], parts[1])
}

#[test]
fn the_supported_range_is_the_matrix() {
    let matrix = matrix();
    let (oldest, newest) = (
        minor_of(&matrix.first().expect("a matrix").0),
        minor_of(&matrix.last().expect("a matrix").0),
    );
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let claims: Vec<&str> = readme
        .lines()
        .filter(|l| l.starts_with("Supported Kubernetes: "))
        .collect();
    let expected = format!("Supported Kubernetes: {oldest} to {newest},");
    assert!(
        claims.len() == 1 && claims[0].starts_with(&expected),
        "README.md must name the supported range in one line starting {expected:?} (the \
         ends of KUBERNETES_MATRIX in tests/harness/versions.env); it has {claims:?}"
    );
    // docs/versions.md's table lists every entry, and the default is the newest.
    let page = std::fs::read_to_string(root().join("docs/versions.md")).expect("versions.md");
    for (k8s, etcd) in &matrix {
        assert!(
            page.contains(&format!("| {k8s} | {etcd} |")),
            "docs/versions.md's matrix table lacks the row | {k8s} | {etcd} |"
        );
    }
    let env = std::fs::read_to_string(root().join("tests/harness/versions.env")).expect("env");
    let default = env
        .lines()
        .find_map(|l| l.strip_prefix("KUBERNETES_VERSION="))
        .expect("KUBERNETES_VERSION");
    assert_eq!(
        default,
        matrix.last().expect("a matrix").0,
        "the default KUBERNETES_VERSION is the matrix's newest entry"
    );
    // k8s-openapi's version feature follows the default's minor.
    let cargo = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let feature = format!("\"v{}\"", newest.replace('.', "_"));
    assert!(
        cargo
            .lines()
            .any(|l| l.starts_with("k8s-openapi") && l.contains(&feature)),
        "Cargo.toml's k8s-openapi must enable {feature}, the default Kubernetes' minor"
    );
}

/// The first fenced block of `lang` in `text`.
fn first_block<'a>(text: &'a str, lang: &str) -> Option<&'a str> {
    let open = format!("```{lang}\n");
    let start = text.find(&open)? + open.len();
    let end = start + text[start..].find("```")?;
    Some(&text[start..end])
}

#[test]
fn readme_examples_are_the_clients_own() {
    // The clients' suites run their README's first example as written; the front page
    // shows exactly those programs.
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    for (lang, client) in [
        ("python", "python"),
        ("go", "go"),
        ("ts", "typescript"),
        ("java", "java"),
    ] {
        let page = format!("clients/{client}/README.md");
        let theirs = std::fs::read_to_string(root.join(&page)).expect("a client README");
        let theirs =
            first_block(&theirs, lang).unwrap_or_else(|| panic!("{page} has no ```{lang} example"));
        let ours = first_block(&readme, lang)
            .unwrap_or_else(|| panic!("README.md has no ```{lang} example (take {page}'s first)"));
        assert_eq!(
            ours, theirs,
            "README.md's ```{lang} example is not the first example of {page}, which that \
             client's tests run: copy it from there"
        );
    }
}
