//! resourceVersions compared as Kubernetes defines it (KEP-5504, stable in 1.35; the
//! reference is apimachinery's `resourceversion.CompareResourceVersion`): the one place
//! the sidecar orders two versions.
//!
//! A version is well formed when it is a non-empty string of ASCII digits without a
//! leading zero (`"0"` is not: the API server uses it as a special value, never as an
//! object's version). Among well-formed versions the shorter is older and versions of
//! one length compare lexically, so there is no size limit and no parse to a
//! fixed-width integer. A version that is not well formed compares only for equality:
//! equal strings are equal, anything else is incomparable ([`compare`] answers `None`).

use std::cmp::Ordering;
use std::fmt;

/// Whether `version` is well formed: ASCII digits, at least one, the first not `0`.
pub fn is_well_formed(version: &str) -> bool {
    let bytes = version.as_bytes();
    bytes.first().is_some_and(|&first| first != b'0') && bytes.iter().all(u8::is_ascii_digit)
}

/// How `a` stands to `b`: `Some(Less)` when `a` is older. Equal strings are equal
/// whatever they hold; otherwise both must be well formed, else `None` (incomparable).
pub fn compare(a: &str, b: &str) -> Option<Ordering> {
    if a == b {
        return Some(Ordering::Equal);
    }
    (is_well_formed(a) && is_well_formed(b)).then(|| a.len().cmp(&b.len()).then(a.cmp(b)))
}

/// Whether `version` is at or past `min` (`false` when the two are incomparable).
pub fn at_least(version: &str, min: &str) -> bool {
    matches!(
        compare(version, min),
        Some(Ordering::Equal | Ordering::Greater)
    )
}

/// Whether `version` is older than `than` (`false` when the two are incomparable).
pub fn older(version: &str, than: &str) -> bool {
    compare(version, than) == Some(Ordering::Less)
}

/// A well-formed resourceVersion: the only kind the sidecar sends as a read's
/// `resourceVersion` query parameter (digits, nothing to escape).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WellFormed(String);

impl WellFormed {
    /// `text` as a well-formed version, or `None` ([`is_well_formed`]).
    pub fn parse(text: &str) -> Option<Self> {
        is_well_formed(text).then(|| Self(text.to_string()))
    }

    /// The version as the API server wrote it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for WellFormed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Ord for WellFormed {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.len().cmp(&other.0.len()).then(self.0.cmp(&other.0))
    }
}

impl PartialOrd for WellFormed {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering::{Equal, Greater, Less};

    use super::*;

    #[test]
    fn well_formed_versions_are_digits_without_a_leading_zero() {
        for good in ["1", "9", "10", "12345", &"9".repeat(40)] {
            assert!(is_well_formed(good), "{good:?}");
            assert!(WellFormed::parse(good).is_some(), "{good:?}");
        }
        for bad in [
            "", "0", "00", "01", "007", "-1", "+1", "1.0", "1e9", " 1", "1 ", "abc", "12a",
            "١٢", // digits, but not ASCII
        ] {
            assert!(!is_well_formed(bad), "{bad:?}");
            assert!(WellFormed::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn shorter_is_older_and_equal_lengths_compare_lexically() {
        let rows = [
            ("1", "2", Less),
            ("9", "10", Less),
            ("10", "9", Greater),
            ("123", "123", Equal),
            ("199", "200", Less),
            ("98765", "12345", Greater),
            // Past 20 digits (more than a u64 holds), still ordered, never parsed.
            ("18446744073709551615", "18446744073709551616", Less),
            ("99999999999999999999", "100000000000000000000", Less),
            (
                "1234567890123456789012345",
                "1234567890123456789012346",
                Less,
            ),
            (
                "1234567890123456789012345",
                "999999999999999999999999",
                Greater,
            ),
            ("1", "1000000000000000000000000000000000000000", Less),
        ];
        for (a, b, want) in rows {
            assert_eq!(compare(a, b), Some(want), "{a} vs {b}");
            assert_eq!(compare(b, a), Some(want.reverse()), "{b} vs {a}");
            let (wa, wb) = (WellFormed::parse(a).unwrap(), WellFormed::parse(b).unwrap());
            assert_eq!(wa.cmp(&wb), want, "{a} vs {b}");
        }
        assert!(at_least("10", "9") && at_least("9", "9") && !at_least("8", "9"));
        assert!(older("8", "9") && !older("9", "9") && !older("10", "9"));
    }

    #[test]
    fn versions_that_are_not_well_formed_compare_only_for_equality() {
        // Equal strings are equal, whatever they hold.
        for same in ["", "0", "007", "abc", "x-1"] {
            assert_eq!(compare(same, same), Some(Equal), "{same:?}");
            assert!(at_least(same, same) && !older(same, same));
        }
        // Anything else with one ill-formed side is incomparable, never ordered: a
        // leading zero is not a smaller number, "0" is not the oldest.
        for (a, b) in [
            ("007", "7"),
            ("07", "8"),
            ("0", "1"),
            ("", "1"),
            ("abc", "1"),
            ("1", "abc"),
            ("12a", "12b"),
            ("01", "02"),
        ] {
            assert_eq!(compare(a, b), None, "{a:?} vs {b:?}");
            assert_eq!(compare(b, a), None, "{b:?} vs {a:?}");
            assert!(!at_least(a, b) && !older(a, b), "{a:?} vs {b:?}");
        }
    }
}
