//! The object a request names, as validated typed values, and the API request paths
//! built from them.
//!
//! Every identity string a caller sends (apiVersion, kind, namespace, name) is checked
//! here against Kubernetes' own rules before anything runs, and the URL of every request
//! to the API server is assembled from these typed segments, each percent-encoded on its
//! own. So no request can address anything but its target: a name cannot carry a `/`,
//! a `?` or a `#` into the path, and a namespace cannot name another resource.

use std::fmt;
use std::ops::Deref;

use crate::resource_version::WellFormed;

/// A request field that does not validate: becomes INVALID_ARGUMENT with a BadRequest
/// field violation, before any request reaches the API server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {description}")]
pub struct FieldViolation {
    /// The request field, as a path (`mutation.cel.expression`).
    pub field: String,
    /// What is wrong and what to do.
    pub description: String,
}

// === impl FieldViolation ===

impl FieldViolation {
    /// The violation of `field` (a path such as `target.name`), with `description`.
    pub fn new(field: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            description: description.into(),
        }
    }
}

/// The longest object name Kubernetes accepts (a DNS-1123 subdomain's limit).
pub const MAX_NAME_LEN: usize = 253;
/// The longest namespace (a DNS-1123 label).
pub const MAX_NAMESPACE_LEN: usize = 63;
/// The longest kind accepted.
pub const MAX_KIND_LEN: usize = 63;
/// The longest field manager the API server accepts.
pub const MAX_FIELD_MANAGER_LEN: usize = 128;
/// The longest uid or resourceVersion precondition accepted.
pub const MAX_OPAQUE_LEN: usize = 128;

/// Defines a validated string newtype that reads as `&str`.
macro_rules! segment {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub struct $name(String);

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

segment!(
    /// `v1` or `group/version`: the group a DNS-1123 subdomain, the version a DNS-1123
    /// label.
    ApiVersion
);
segment!(
    /// A kind: a letter followed by letters and digits (`ConfigMap`).
    Kind
);
segment!(
    /// A namespace (a DNS-1123 label), or empty for a cluster-scoped object.
    Namespace
);
segment!(
    /// An object name: a Kubernetes path-segment name limited to characters that mean
    /// nothing in a URL (letters, digits and `-._:@+~=`).
    Name
);
segment!(
    /// A field manager: 1 to 128 printable ASCII characters.
    FieldManager
);

// === impl ApiVersion ===

impl ApiVersion {
    /// Checks `text` as an apiVersion; `field` names it in the violation.
    pub fn parse(field: &str, text: &str) -> Result<Self, FieldViolation> {
        let bad = |why: &str| {
            FieldViolation::new(
                field,
                format!("{why}: an apiVersion is \"v1\" or \"group/version\" (\"apps/v1\")"),
            )
        };
        let (group, version) = match text.split_once('/') {
            Some((group, version)) => (Some(group), version),
            None => (None, text),
        };
        if let Some(group) = group
            && !is_dns1123_subdomain(group)
        {
            return Err(bad("the group is not a DNS-1123 subdomain"));
        }
        if !is_dns1123_label(version) {
            return Err(bad("the version is not a DNS-1123 label"));
        }
        Ok(Self(text.to_string()))
    }

    /// The group, empty for the core group.
    pub fn group(&self) -> &str {
        self.0.split_once('/').map(|(g, _)| g).unwrap_or("")
    }

    /// The version.
    pub fn version(&self) -> &str {
        self.0.split_once('/').map(|(_, v)| v).unwrap_or(&self.0)
    }
}

// === impl Kind ===

impl Kind {
    /// Checks `text` as a kind.
    pub fn parse(field: &str, text: &str) -> Result<Self, FieldViolation> {
        let mut chars = text.chars();
        let starts = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
        if !starts || text.len() > MAX_KIND_LEN || !chars.all(|c| c.is_ascii_alphanumeric()) {
            return Err(FieldViolation::new(
                field,
                format!(
                    "a kind is a letter followed by up to {} letters and digits (\"ConfigMap\")",
                    MAX_KIND_LEN - 1
                ),
            ));
        }
        Ok(Self(text.to_string()))
    }
}

// === impl Namespace ===

impl Namespace {
    /// Checks `text` as a namespace; empty means cluster-scoped.
    pub fn parse(field: &str, text: &str) -> Result<Self, FieldViolation> {
        if !text.is_empty() && !is_dns1123_label(text) {
            return Err(FieldViolation::new(
                field,
                format!(
                    "a namespace is a DNS-1123 label: 1 to {MAX_NAMESPACE_LEN} lowercase letters, digits and '-', starting and ending with a letter or digit"
                ),
            ));
        }
        Ok(Self(text.to_string()))
    }
}

// === impl Name ===

impl Name {
    /// Checks `text` as an object name.
    pub fn parse(field: &str, text: &str) -> Result<Self, FieldViolation> {
        let fits = |c: char| c.is_ascii_alphanumeric() || "-._:@+~=".contains(c);
        if text.is_empty() {
            return Err(FieldViolation::new(field, "required"));
        }
        if text.len() > MAX_NAME_LEN || text == "." || text == ".." || !text.chars().all(fits) {
            return Err(FieldViolation::new(
                field,
                format!(
                    "a name is 1 to {MAX_NAME_LEN} letters, digits and '-._:@+~=', and not \".\" or \"..\""
                ),
            ));
        }
        Ok(Self(text.to_string()))
    }
}

// === impl FieldManager ===

impl FieldManager {
    /// Checks `text` as a field manager.
    pub fn parse(field: &str, text: &str) -> Result<Self, FieldViolation> {
        if text.is_empty()
            || text.len() > MAX_FIELD_MANAGER_LEN
            || !text.chars().all(|c| c.is_ascii_graphic() || c == ' ')
        {
            return Err(FieldViolation::new(
                field,
                format!(
                    "a field manager is 1 to {MAX_FIELD_MANAGER_LEN} printable ASCII characters"
                ),
            ));
        }
        Ok(Self(text.to_string()))
    }
}

/// Checks an opaque token the API server compares (uid, resourceVersion): 1 to 128
/// characters of `[A-Za-z0-9._:-]` (what UIDs and resourceVersions are made of), so that
/// it can be quoted in messages.
pub fn opaque(field: &str, text: &str) -> Result<String, FieldViolation> {
    let fits = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-');
    if text.is_empty() || text.len() > MAX_OPAQUE_LEN || !text.chars().all(fits) {
        return Err(FieldViolation::new(
            field,
            format!("must be 1 to {MAX_OPAQUE_LEN} characters of [A-Za-z0-9._:-]"),
        ));
    }
    Ok(text.to_string())
}

/// A DNS-1123 label: 1-63 of `[a-z0-9-]`, alphanumeric at both ends.
pub fn is_dns1123_label(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// A DNS-1123 subdomain: 1-253 characters of dot-separated DNS-1123 labels.
pub fn is_dns1123_subdomain(text: &str) -> bool {
    text.len() <= 253 && text.split('.').all(is_dns1123_label)
}

/// The object a request names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The object's apiVersion (`v1`, `apps/v1`).
    pub api_version: ApiVersion,
    /// The object's kind (`ConfigMap`).
    pub kind: Kind,
    /// Empty for a cluster-scoped object.
    pub namespace: Namespace,
    /// The object's name.
    pub name: Name,
}

/// The resource a kind is served as, from discovery: the group, version and plural
/// that make up its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    group: String,
    version: String,
    plural: String,
}

// === impl ResourcePath ===

impl ResourcePath {
    /// The path of `plural` in `group`/`version` (as discovery reported them). Each is
    /// checked as the DNS name the API server serves it as, so that even an odd
    /// discovery answer cannot reshape a request's path.
    pub fn new(group: &str, version: &str, plural: &str) -> Option<Self> {
        let group_ok = group.is_empty() || is_dns1123_subdomain(group);
        (group_ok && is_dns1123_label(version) && is_dns1123_label(plural)).then(|| Self {
            group: group.to_string(),
            version: version.to_string(),
            plural: plural.to_string(),
        })
    }

    /// The path of one object of this resource, or of its `subresource`.
    pub fn object(&self, namespace: &Namespace, name: &Name) -> ObjectPath {
        let mut path = String::with_capacity(64 + name.len());
        if self.group.is_empty() {
            path.push_str("/api/");
        } else {
            path.push_str("/apis/");
            push_segment(&mut path, &self.group);
            path.push('/');
        }
        push_segment(&mut path, &self.version);
        if !namespace.is_empty() {
            path.push_str("/namespaces/");
            push_segment(&mut path, namespace);
        }
        path.push('/');
        push_segment(&mut path, &self.plural);
        let collection = path.len();
        path.push('/');
        push_segment(&mut path, name);
        ObjectPath { path, collection }
    }
}

/// The path of one object, from which each request's URL is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectPath {
    path: String,
    /// Where the collection's path ends (for a create).
    collection: usize,
}

/// Which request to make of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// GET of the object.
    Get,
    /// PUT of the object or its status.
    Replace,
    /// POST to the collection.
    Create,
    /// Server-side apply (PATCH, `application/apply-patch+yaml`).
    Apply,
    /// DELETE of the object, its body a `DeleteOptions`.
    Delete,
}

/// Query parameters of a write.
#[derive(Debug, Clone, Default)]
pub struct WriteParams<'a> {
    /// Sends `dryRun=All`: the API server validates and answers but persists nothing.
    pub dry_run: bool,
    /// Sent as `fieldManager`, when set.
    pub field_manager: Option<&'a FieldManager>,
    /// Server-side apply's `force`.
    pub force: bool,
}

// === impl ObjectPath ===

impl ObjectPath {
    /// The object's path (no query).
    pub fn as_str(&self) -> &str {
        &self.path
    }

    /// The GET of the object. With `not_older_than`, the API server's "not older than"
    /// read (`resourceVersion=<min>`): served from its watch cache at a revision at or
    /// past `min`, without a round trip to etcd, or refused (504, cause
    /// `ResourceVersionTooLarge`) when its cache does not reach `min` within a few
    /// seconds. Without it, a live (quorum) read.
    pub fn get(&self, not_older_than: Option<&WellFormed>) -> http::Request<Vec<u8>> {
        let mut query = form_urlencoded::Serializer::new(String::new());
        if let Some(min) = not_older_than {
            query.append_pair("resourceVersion", min.as_str());
        }
        let uri = with_query(self.path.clone(), query.finish());
        http::Request::get(uri)
            .body(Vec::new())
            .expect("a path of validated, escaped segments is a valid URI")
    }

    /// Builds the HTTP request for `verb` on the object (or its status subresource when
    /// `status`), with `params` as an escaped query string.
    pub fn request(
        &self,
        verb: Verb,
        status: bool,
        params: &WriteParams<'_>,
        body: Vec<u8>,
    ) -> http::Request<Vec<u8>> {
        let mut uri = match verb {
            Verb::Create => self.path[..self.collection].to_string(),
            _ => self.path.clone(),
        };
        if status && verb != Verb::Create {
            uri.push_str("/status");
        }
        let mut query = form_urlencoded::Serializer::new(String::new());
        if verb != Verb::Get {
            if params.dry_run {
                query.append_pair("dryRun", "All");
            }
            if let Some(manager) = params.field_manager {
                query.append_pair("fieldManager", manager);
            }
            if verb == Verb::Apply && params.force {
                query.append_pair("force", "true");
            }
        }
        let uri = with_query(uri, query.finish());
        let (method, content_type) = match verb {
            Verb::Get => (http::Method::GET, None),
            Verb::Replace => (http::Method::PUT, Some("application/json")),
            Verb::Create => (http::Method::POST, Some("application/json")),
            Verb::Apply => (http::Method::PATCH, Some("application/apply-patch+yaml")),
            Verb::Delete => (http::Method::DELETE, Some("application/json")),
        };
        let mut builder = http::Request::builder().method(method).uri(uri);
        if let Some(content_type) = content_type {
            builder = builder.header(http::header::CONTENT_TYPE, content_type);
        }
        builder
            .body(body)
            .expect("a path of validated, escaped segments is a valid URI")
    }
}

/// `uri` with `query` (already escaped) appended, when there is one.
fn with_query(mut uri: String, query: String) -> String {
    if !query.is_empty() {
        uri.push('?');
        uri.push_str(&query);
    }
    uri
}

/// Appends `segment` percent-encoded: everything but RFC 3986 unreserved characters and
/// `:@+=` is escaped, so a segment can never end the path or start a query or fragment.
fn push_segment(path: &mut String, segment: &str) {
    for byte in segment.bytes() {
        let keep = byte.is_ascii_alphanumeric() || b"-._~:@+=".contains(&byte);
        if keep {
            path.push(byte as char);
        } else {
            path.push_str(&format!("%{byte:02X}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(namespace: &str, name: &str) -> Result<(Namespace, Name), FieldViolation> {
        Ok((
            Namespace::parse("target.namespace", namespace)?,
            Name::parse("target.name", name)?,
        ))
    }

    #[test]
    fn hostile_identities_are_refused_naming_the_field() {
        for (namespace, name, field) in [
            ("acl/secrets/victim#", "x", "target.namespace"),
            ("default", "x#", "target.name"),
            ("default", "x?dryRun=All", "target.name"),
            ("default", "../secrets/x", "target.name"),
            ("default", "..", "target.name"),
            ("default", "a%2Fb", "target.name"),
            ("default", "a b", "target.name"),
            ("default", "a\nb", "target.name"),
            ("default", "é", "target.name"),
            ("Default", "x", "target.namespace"),
            ("-x", "x", "target.namespace"),
            (&"a".repeat(64), "x", "target.namespace"),
            ("default", &"a".repeat(254), "target.name"),
            ("default", "", "target.name"),
        ] {
            let err = target(namespace, name).expect_err(name);
            assert_eq!(err.field, field, "{namespace:?} {name:?}");
        }
        for (namespace, name) in [
            ("default", "x"),
            ("", "system:controller:job-controller"),
            ("kube-system", "a.b-c_d"),
            ("a", &"a".repeat(253)),
        ] {
            target(namespace, name).expect(name);
        }
    }

    #[test]
    fn api_versions_and_kinds_follow_kubernetes_rules() {
        for ok in ["v1", "apps/v1", "safewrite.dev/v1alpha1"] {
            ApiVersion::parse("target.api_version", ok).expect(ok);
        }
        for bad in [
            "", "/v1", "apps/", "Apps/v1", "a/b/c", "v1?x", "apps/v1#", "a..b/v1",
        ] {
            let err = ApiVersion::parse("target.api_version", bad).expect_err(bad);
            assert_eq!(err.field, "target.api_version");
        }
        for ok in ["ConfigMap", "Pod", "V1Thing"] {
            Kind::parse("target.kind", ok).expect(ok);
        }
        for bad in [
            "",
            "1Pod",
            "Config Map",
            "Config/Map",
            "Pod?",
            &"K".repeat(64),
        ] {
            Kind::parse("target.kind", bad).expect_err(bad);
        }
        let v = ApiVersion::parse("f", "apps/v1").unwrap();
        assert_eq!((v.group(), v.version()), ("apps", "v1"));
        let v = ApiVersion::parse("f", "v1").unwrap();
        assert_eq!((v.group(), v.version()), ("", "v1"));
    }

    #[test]
    fn paths_are_built_from_escaped_segments() {
        let core = ResourcePath::new("", "v1", "configmaps").unwrap();
        let (ns, name) = target("default", "system:x").unwrap();
        let path = core.object(&ns, &name);
        assert_eq!(
            path.as_str(),
            "/api/v1/namespaces/default/configmaps/system:x"
        );
        let manager = FieldManager::parse("f", "my ctl&x=1").unwrap();
        let params = WriteParams {
            dry_run: true,
            field_manager: Some(&manager),
            force: false,
        };
        let put = path.request(Verb::Replace, true, &params, Vec::new());
        assert_eq!(put.method(), http::Method::PUT);
        assert_eq!(
            put.uri().to_string(),
            "/api/v1/namespaces/default/configmaps/system:x/status?dryRun=All&fieldManager=my+ctl%26x%3D1"
        );
        let post = path.request(Verb::Create, false, &params, Vec::new());
        assert_eq!(post.uri().path(), "/api/v1/namespaces/default/configmaps");
        let get = path.request(Verb::Get, false, &params, Vec::new());
        assert_eq!(
            get.uri().query(),
            None,
            "a read carries no write parameters"
        );
        assert_eq!(path.get(None).uri(), get.uri());
        let min = crate::resource_version::WellFormed::parse("1234567890123456789012345").unwrap();
        let at_least = path.get(Some(&min));
        assert_eq!(at_least.method(), http::Method::GET);
        assert_eq!(
            at_least.uri().to_string(),
            "/api/v1/namespaces/default/configmaps/system:x?resourceVersion=1234567890123456789012345"
        );

        let crd = ResourcePath::new("safewrite.dev", "v1", "widgets").unwrap();
        let cluster = crd.object(&Namespace::parse("f", "").unwrap(), &name);
        let apply = cluster.request(
            Verb::Apply,
            false,
            &WriteParams {
                dry_run: false,
                field_manager: Some(&manager),
                force: true,
            },
            Vec::new(),
        );
        assert_eq!(
            apply.uri().path(),
            "/apis/safewrite.dev/v1/widgets/system:x"
        );
        assert!(apply.uri().query().unwrap().ends_with("&force=true"));
        // Even a segment that escaped validation could not leave its place.
        let mut raw = String::new();
        push_segment(&mut raw, "a/b?c#d%");
        assert_eq!(raw, "a%2Fb%3Fc%23d%25");
        assert!(ResourcePath::new("", "v1", "config/maps").is_none());
    }
}
