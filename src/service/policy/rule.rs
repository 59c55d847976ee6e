//! One allow rule: its flag syntax (`GROUP/KIND[:NAMESPACES[:SUBRESOURCES[:OPERATIONS]]]`,
//! see [`super`]), how it prints, and what it matches.

use std::fmt;

use safewrite_engine::Subresource;

/// What a caller asks to do to its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// UpdateWithRetry (the main resource).
    Update,
    /// PatchStatus (the status subresource).
    PatchStatus,
    /// Transact (either subresource).
    Transact,
    /// Creating the target when it is missing (`options.create_if_missing_json`).
    CreateIfMissing,
    /// Get (reading the object, read-your-own-writes).
    Get,
    /// Lead (campaigning for a `coordination.k8s.io/Lease`: reading, creating and
    /// writing it).
    Lead,
    /// Delete (deleting the object).
    Delete,
}

// === impl Operation ===

impl Operation {
    const ALL: [Operation; 7] = [
        Operation::Update,
        Operation::PatchStatus,
        Operation::Transact,
        Operation::CreateIfMissing,
        Operation::Get,
        Operation::Lead,
        Operation::Delete,
    ];

    /// The operation's name in rules.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Update => "update",
            Operation::PatchStatus => "patch-status",
            Operation::Transact => "transact",
            Operation::CreateIfMissing => "create-if-missing",
            Operation::Get => "get",
            Operation::Lead => "lead",
            Operation::Delete => "delete",
        }
    }

    pub(super) fn bit(self) -> u8 {
        1 << self as u8
    }
}

pub(super) const ALL_OPERATIONS: u8 = 0b111_1111;

/// The name of a subresource in rules.
pub(super) fn subresource_name(subresource: Subresource) -> &'static str {
    match subresource {
        Subresource::Main => "main",
        Subresource::Status => "status",
    }
}

/// A group pattern: the core group is the empty string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Pattern {
    Any,
    Is(String),
}

// === impl Pattern ===

impl Pattern {
    fn matches(&self, text: &str) -> bool {
        match self {
            Pattern::Any => true,
            Pattern::Is(want) => want == text,
        }
    }
}

/// One entry of a namespace list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum NamespacePattern {
    /// Cluster-scoped objects (`-`).
    Cluster,
    Is(String),
    /// Namespaces starting with this (`team-*`).
    Prefix(String),
}

/// One allow rule. See the module docs for the syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub(super) group: Pattern,
    pub(super) kind: Pattern,
    /// `None`: every namespace, and cluster-scoped objects.
    pub(super) namespaces: Option<Vec<NamespacePattern>>,
    pub(super) main: bool,
    pub(super) status: bool,
    pub(super) operations: u8,
    /// Where the rule was given, for messages: `--allow`, or `FILE rule N`.
    pub(super) origin: String,
}

/// A rule that does not parse; the message says what is wrong and what is expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RuleError(pub(super) String);

// === impl Rule ===

impl Rule {
    /// `*`: every kind but Secrets, everywhere, every operation.
    pub(super) fn everything() -> Rule {
        Rule {
            group: Pattern::Any,
            kind: Pattern::Any,
            namespaces: None,
            main: true,
            status: true,
            operations: ALL_OPERATIONS,
            origin: "the default policy".into(),
        }
    }

    /// Parses a rule in the flag syntax, e.g. `apps/Deployment:ns1,ns2:main,status`.
    ///
    /// # Errors
    /// A [`RuleError`] naming the part that does not parse.
    pub fn parse(text: &str) -> Result<Rule, RuleError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(RuleError(
                "empty rule: write GROUP/KIND[:NAMESPACES[:SUBRESOURCES[:OPERATIONS]]]".into(),
            ));
        }
        let parts: Vec<&str> = text.split(':').collect();
        if parts.len() > 4 {
            return Err(RuleError(format!(
                "{text:?} has {} parts: write GROUP/KIND[:NAMESPACES[:SUBRESOURCES[:OPERATIONS]]]",
                parts.len()
            )));
        }
        let part = |i: usize| parts.get(i).copied().unwrap_or("");
        let (group, kind) = parse_group_kind(part(0))?;
        Rule {
            group,
            kind,
            namespaces: parse_namespaces(&split_list(part(1)))?,
            main: true,
            status: true,
            operations: ALL_OPERATIONS,
            origin: "--allow".into(),
        }
        .with_subresources(&split_list(part(2)))?
        .with_operations(&split_list(part(3)))
    }

    pub(super) fn with_subresources(mut self, items: &[String]) -> Result<Rule, RuleError> {
        if items.is_empty() || items.iter().any(|i| i == "*") {
            return Ok(self);
        }
        (self.main, self.status) = (false, false);
        for item in items {
            match item.as_str() {
                "main" => self.main = true,
                "status" => self.status = true,
                other => {
                    return Err(RuleError(format!(
                        "subresource {other:?}: use main, status or *"
                    )));
                }
            }
        }
        Ok(self)
    }

    pub(super) fn with_operations(mut self, items: &[String]) -> Result<Rule, RuleError> {
        if items.is_empty() || items.iter().any(|i| i == "*") {
            return Ok(self);
        }
        self.operations = 0;
        for item in items {
            let operation = Operation::ALL
                .into_iter()
                .find(|o| o.name() == item)
                .ok_or_else(|| {
                    RuleError(format!(
                        "operation {item:?}: use update, patch-status, transact, create-if-missing, get, lead, delete or *"
                    ))
                })?;
            self.operations |= operation.bit();
        }
        Ok(self)
    }

    /// Whether the rule names `core/Secret` itself (wildcards never match Secrets).
    pub fn names_secrets(&self) -> bool {
        self.group == Pattern::Is(String::new()) && self.kind == Pattern::Is("Secret".into())
    }

    pub(super) fn matches_kind(&self, group: &str, kind: &str) -> bool {
        if is_secret(group, kind) {
            return self.names_secrets();
        }
        self.group.matches(group) && self.kind.matches(kind)
    }

    pub(super) fn matches_namespace(&self, namespace: &str) -> bool {
        let Some(list) = &self.namespaces else {
            return true;
        };
        list.iter().any(|pattern| match pattern {
            NamespacePattern::Cluster => namespace.is_empty(),
            NamespacePattern::Is(name) => name == namespace,
            NamespacePattern::Prefix(prefix) => {
                !namespace.is_empty() && namespace.starts_with(prefix.as_str())
            }
        })
    }

    pub(super) fn matches_subresource(&self, subresource: Subresource) -> bool {
        match subresource {
            Subresource::Main => self.main,
            Subresource::Status => self.status,
        }
    }

    pub(super) fn grants(&self, operation: Operation) -> bool {
        self.operations & operation.bit() != 0
    }

    /// Where the rule came from (`--allow`, `FILE rule N`).
    pub fn origin(&self) -> &str {
        &self.origin
    }
}

/// `group/kind` as rules write it (`core/Secret`).
pub(super) fn group_kind(group: &str, kind: &str) -> String {
    let group = if group.is_empty() { "core" } else { group };
    format!("{group}/{kind}")
}

pub(super) fn is_secret(group: &str, kind: &str) -> bool {
    group.is_empty() && kind == "Secret"
}

// === impl Rule ===

impl fmt::Display for Rule {
    /// The rule in the flag syntax, every part spelled out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.group, &self.kind) {
            (Pattern::Any, Pattern::Any) => f.write_str("*")?,
            (group, kind) => {
                let group = match group {
                    Pattern::Any => "*",
                    Pattern::Is(g) if g.is_empty() => "core",
                    Pattern::Is(g) => g,
                };
                let kind = match kind {
                    Pattern::Any => "*",
                    Pattern::Is(k) => k,
                };
                write!(f, "{group}/{kind}")?;
            }
        }
        let namespaces = match &self.namespaces {
            None => "*".to_string(),
            Some(list) => list
                .iter()
                .map(|p| match p {
                    NamespacePattern::Cluster => "-".to_string(),
                    NamespacePattern::Is(n) => n.clone(),
                    NamespacePattern::Prefix(p) => format!("{p}*"),
                })
                .collect::<Vec<_>>()
                .join(","),
        };
        let subresources = match (self.main, self.status) {
            (true, true) => "*",
            (true, false) => "main",
            _ => "status",
        };
        let operations = if self.operations == ALL_OPERATIONS {
            "*".to_string()
        } else {
            Operation::ALL
                .into_iter()
                .filter(|o| self.grants(*o))
                .map(Operation::name)
                .collect::<Vec<_>>()
                .join(",")
        };
        write!(f, ":{namespaces}:{subresources}:{operations}")
    }
}

/// The comma-separated items of a rule part, trimmed, empty ones dropped.
pub(super) fn split_list(part: &str) -> Vec<String> {
    part.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

pub(super) fn parse_group_kind(text: &str) -> Result<(Pattern, Pattern), RuleError> {
    let text = text.trim();
    if text == "*" {
        return Ok((Pattern::Any, Pattern::Any));
    }
    let Some((group, kind)) = text.split_once('/') else {
        return Err(RuleError(format!(
            "{text:?}: name the group and the kind as GROUP/KIND, e.g. apps/Deployment, core/ConfigMap (the core group), example.com/*, or * for every kind"
        )));
    };
    if kind.contains('/') {
        return Err(RuleError(format!(
            "{text:?}: a rule names a group, not a version: write GROUP/KIND, e.g. apps/Deployment"
        )));
    }
    let group = match group {
        "*" => Pattern::Any,
        "" | "core" | "v1" => Pattern::Is(String::new()),
        g if safewrite_api::target::is_dns1123_subdomain(g) => Pattern::Is(g.to_string()),
        g => {
            return Err(RuleError(format!(
                "group {g:?} is not a DNS-1123 subdomain (use core for the core group, or *)"
            )));
        }
    };
    let kind = match kind {
        "*" => Pattern::Any,
        k => {
            safewrite_api::target::Kind::parse("kind", k)
                .map_err(|v| RuleError(format!("kind {k:?}: {}", v.description)))?;
            Pattern::Is(k.to_string())
        }
    };
    Ok((group, kind))
}

pub(super) fn parse_namespaces(
    items: &[String],
) -> Result<Option<Vec<NamespacePattern>>, RuleError> {
    if items.is_empty() || items.iter().any(|i| i == "*") {
        return Ok(None);
    }
    items
        .iter()
        .map(|item| {
            let bad = || {
                RuleError(format!(
                    "namespace {item:?}: use a namespace (a DNS-1123 label), a prefix such as team-*, - for cluster-scoped objects, or *"
                ))
            };
            if item == "-" {
                Ok(NamespacePattern::Cluster)
            } else if let Some(prefix) = item.strip_suffix('*') {
                let fits = prefix
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
                if prefix.is_empty() || !fits || prefix.starts_with('-') {
                    return Err(bad());
                }
                Ok(NamespacePattern::Prefix(prefix.to_string()))
            } else if safewrite_api::target::is_dns1123_label(item) {
                Ok(NamespacePattern::Is(item.clone()))
            } else {
                Err(bad())
            }
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_print_in_the_flag_syntax() {
        for (given, printed) in [
            ("*", "*:*:*:*"),
            ("apps/Deployment", "apps/Deployment:*:*:*"),
            ("v1/Secret:a", "core/Secret:a:*:*"),
            (
                "core/ConfigMap:a,b-*,-:status:create-if-missing,update",
                "core/ConfigMap:a,b-*,-:status:update,create-if-missing",
            ),
            ("example.com/*::main", "example.com/*:*:main:*"),
        ] {
            assert_eq!(Rule::parse(given).unwrap().to_string(), printed, "{given}");
        }
    }

    #[test]
    fn bad_rules_say_what_is_expected() {
        for (rule, says) in [
            ("Deployment", "GROUP/KIND"),
            ("apps/v1/Deployment", "not a version"),
            ("apps/Deploy-ment", "kind"),
            ("Apps/Deployment", "DNS-1123 subdomain"),
            ("apps/Deployment:NS", "namespace \"NS\""),
            ("apps/Deployment:*:spec", "subresource \"spec\""),
            ("apps/Deployment:*:*:remove", "operation \"remove\""),
            ("a/B:c:d:e:f", "5 parts"),
            ("", "empty rule"),
        ] {
            let err = Rule::parse(rule).unwrap_err().to_string();
            assert!(err.contains(says), "{rule:?}: {err}");
        }
    }
}
