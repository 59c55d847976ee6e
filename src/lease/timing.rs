//! A campaign's settings as validated typed values: the Lease it campaigns for
//! ([`LeaseName`]), the identity it holds it under, and its three durations
//! ([`LeaseTimings`]), checked the way client-go checks them (lease duration > renew
//! deadline > 1.2 retry periods, all positive) before anything is sent.

use std::time::Duration;

use safewrite_api::target::{
    FieldViolation, Name, Namespace, is_dns1123_label, is_dns1123_subdomain,
};

/// client-go's default lease duration.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// client-go's default renew deadline.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// client-go's default retry period.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// The longest duration accepted for any of the three.
pub const MAX_DURATION: Duration = Duration::from_secs(3600);
/// The shortest retry period accepted.
pub const MIN_RETRY_PERIOD: Duration = Duration::from_millis(10);
/// The longest identity accepted.
pub const MAX_IDENTITY_LEN: usize = 253;

/// The Lease a campaign is for: a namespace (a DNS-1123 label) and a name (a DNS-1123
/// subdomain, as the API server requires of a Lease).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseName {
    pub(crate) namespace: Namespace,
    pub(crate) name: Name,
}

// === impl LeaseName ===

impl LeaseName {
    /// Checks `namespace` and `name`; the violation names the field.
    pub fn parse(namespace: &str, name: &str) -> Result<Self, FieldViolation> {
        if !is_dns1123_label(namespace) {
            return Err(FieldViolation::new(
                "namespace",
                "required: the Lease's namespace, a DNS-1123 label (1 to 63 lowercase letters, digits and '-', alphanumeric at both ends)",
            ));
        }
        if !is_dns1123_subdomain(name) {
            return Err(FieldViolation::new(
                "name",
                "required: the Lease's name, a DNS-1123 subdomain (dot-separated DNS-1123 labels, at most 253 characters)",
            ));
        }
        Ok(Self {
            namespace: Namespace::parse("namespace", namespace)?,
            name: Name::parse("name", name)?,
        })
    }
}

/// Checks a caller's identity: 1 to 253 printable ASCII characters without spaces.
pub fn identity(text: &str) -> Result<String, FieldViolation> {
    if text.is_empty()
        || text.len() > MAX_IDENTITY_LEN
        || !text.chars().all(|c| c.is_ascii_graphic())
    {
        return Err(FieldViolation::new(
            "identity",
            format!(
                "1 to {MAX_IDENTITY_LEN} printable ASCII characters without spaces, or empty for one the sidecar makes"
            ),
        ));
    }
    Ok(text.to_string())
}

/// The three durations of a campaign, as client-go's `LeaderElectionConfig` has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    /// How long the Lease lasts after its last renewal (whole seconds: the Lease stores
    /// seconds).
    pub lease_duration: Duration,
    /// How long the leader leads without a successful renewal.
    pub renew_deadline: Duration,
    /// How often the campaign acquires or renews.
    pub retry_period: Duration,
}

// === impl LeaseTimings ===

impl Default for LeaseTimings {
    fn default() -> Self {
        Self {
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
        }
    }
}

impl LeaseTimings {
    /// The timings given (`None` takes client-go's default), checked: lease duration in
    /// whole seconds, all within [`MAX_DURATION`], the retry period at least
    /// [`MIN_RETRY_PERIOD`], and lease duration > renew deadline > 1.2 retry periods.
    ///
    /// # Errors
    /// A [`FieldViolation`] naming the first field that does not fit.
    pub fn new(
        lease_duration: Option<Duration>,
        renew_deadline: Option<Duration>,
        retry_period: Option<Duration>,
    ) -> Result<Self, FieldViolation> {
        let timings = Self {
            lease_duration: lease_duration.unwrap_or(DEFAULT_LEASE_DURATION),
            renew_deadline: renew_deadline.unwrap_or(DEFAULT_RENEW_DEADLINE),
            retry_period: retry_period.unwrap_or(DEFAULT_RETRY_PERIOD),
        };
        let bad = |field: &str, why: String| Err(FieldViolation::new(field, why));
        for (field, value) in [
            ("lease_duration", timings.lease_duration),
            ("renew_deadline", timings.renew_deadline),
            ("retry_period", timings.retry_period),
        ] {
            if value.is_zero() || value > MAX_DURATION {
                return bad(
                    field,
                    format!("must be more than 0 and at most {MAX_DURATION:?}"),
                );
            }
        }
        if timings.lease_duration.subsec_nanos() != 0 {
            return bad(
                "lease_duration",
                "must be whole seconds: the Lease stores its duration in seconds".into(),
            );
        }
        if timings.retry_period < MIN_RETRY_PERIOD {
            return bad(
                "retry_period",
                format!("must be at least {MIN_RETRY_PERIOD:?}"),
            );
        }
        if timings.lease_duration <= timings.renew_deadline {
            return bad(
                "lease_duration",
                format!(
                    "must be longer than renew_deadline ({:?}), as client-go requires",
                    timings.renew_deadline
                ),
            );
        }
        if timings.renew_deadline.as_secs_f64() <= timings.retry_period.as_secs_f64() * 1.2 {
            return bad(
                "renew_deadline",
                format!(
                    "must be longer than 1.2 x retry_period ({:?}), as client-go requires",
                    timings.retry_period
                ),
            );
        }
        Ok(timings)
    }

    /// The lease duration in the Lease's own unit.
    pub fn lease_seconds(&self) -> u64 {
        self.lease_duration.as_secs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    #[test]
    fn unset_durations_take_client_go_defaults() {
        assert_eq!(
            LeaseTimings::new(None, None, None).unwrap(),
            LeaseTimings::default()
        );
    }

    #[test]
    fn contradicting_durations_are_refused_naming_the_field() {
        let field = |l, r, p| LeaseTimings::new(l, r, p).unwrap_err().field;
        assert_eq!(field(ms(2000), ms(2000), ms(300)), "lease_duration");
        assert_eq!(field(ms(2000), ms(1500), ms(1300)), "renew_deadline");
        assert_eq!(field(ms(2500), ms(1500), ms(300)), "lease_duration");
        assert_eq!(field(ms(2000), ms(1500), ms(0)), "retry_period");
        assert_eq!(field(ms(2000), ms(0), ms(300)), "renew_deadline");
        assert_eq!(field(ms(2000), ms(1500), ms(5)), "retry_period");
        assert!(LeaseTimings::new(ms(2000), ms(1500), ms(300)).is_ok());
    }

    #[test]
    fn names_are_checked_as_kubernetes_does() {
        assert_eq!(
            LeaseName::parse("Bad_NS", "l").unwrap_err().field,
            "namespace"
        );
        assert_eq!(LeaseName::parse("", "l").unwrap_err().field, "namespace");
        assert_eq!(LeaseName::parse("ns", "a/b").unwrap_err().field, "name");
        assert_eq!(LeaseName::parse("ns", "A").unwrap_err().field, "name");
        assert!(LeaseName::parse("ns", "my.lease-1").is_ok());
        assert_eq!(identity("a b").unwrap_err().field, "identity");
        assert!(identity("pod-1_abc").is_ok());
    }
}
