//! Version negotiation: which `version` values a peer may send, so that both sides agree on one
//! rule instead of re-deriving it from prose.

use thiserror::Error;

/// The version this crate speaks and stamps on every response.
pub const PROTOCOL_VERSION: &str = "1.0";

/// How an accepted version should be treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionStatus {
    /// `""` (field missing) or the current version.
    Current,
    /// Still served, but the peer should be told (logged) to upgrade.
    Deprecated,
}

/// A version this side cannot serve.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unsupported protocol version: {0}")]
pub struct VersionError(pub String);

/// Decides whether a request's `version` is acceptable.
pub fn negotiate(version: &str) -> Result<VersionStatus, VersionError> {
    match version {
        "" | PROTOCOL_VERSION => Ok(VersionStatus::Current),
        "0.9" => Ok(VersionStatus::Deprecated),
        other => Err(VersionError(other.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_current_are_current() {
        assert_eq!(negotiate(""), Ok(VersionStatus::Current));
        assert_eq!(negotiate("1.0"), Ok(VersionStatus::Current));
    }

    #[test]
    fn zero_nine_is_deprecated() {
        assert_eq!(negotiate("0.9"), Ok(VersionStatus::Deprecated));
    }

    #[test]
    fn others_are_rejected_with_the_spec_message() {
        for bad in ["2.0", "1", "1.0.0", "0.8", " 1.0"] {
            let err = negotiate(bad).unwrap_err();
            assert_eq!(err.to_string(), format!("unsupported protocol version: {bad}"));
        }
    }
}
