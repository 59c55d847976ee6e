//! An upper bound of a value, the unit of the estimates.

use super::limits::VALUE;

/// An upper bound of a value: its size (units, see [`VALUE`]), its length (elements of
/// a list or map, bytes of a string) and the size of its largest element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Bound {
    pub(super) size: u64,
    pub(super) len: u64,
    pub(super) elem: u64,
}

impl Bound {
    pub(super) const SCALAR: Bound = Bound {
        size: VALUE,
        len: 0,
        elem: 0,
    };

    /// Any value of at most `size` units.
    pub(super) fn within(size: u64) -> Bound {
        Bound {
            size,
            len: size,
            elem: size,
        }
    }

    pub(super) fn text(len: u64) -> Bound {
        Bound {
            size: VALUE.saturating_add(len),
            len,
            elem: 0,
        }
    }

    pub(super) fn element(self) -> Bound {
        Bound::within(self.elem)
    }

    pub(super) fn join(self, other: Bound) -> Bound {
        Bound {
            size: self.size.max(other.size),
            len: self.len.max(other.len),
            elem: self.elem.max(other.elem),
        }
    }

    pub(super) fn is_scalar(self) -> bool {
        self.size <= VALUE && self.len == 0
    }

    /// How many steps iterating it may take.
    pub(super) fn iterations(self) -> u64 {
        self.len.min(self.size / VALUE)
    }

    pub(super) fn optional(self) -> Bound {
        Bound {
            size: VALUE.saturating_add(self.size),
            len: 1,
            elem: self.size,
        }
    }
}
