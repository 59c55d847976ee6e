//! Optional shared-token authentication of the Writer service, the way Dapr's
//! `dapr-api-token` works: with `--token-file FILE`, every call of
//! `safewrite.v1.WriterService` must carry the file's token as gRPC metadata
//! `authorization: Bearer <token>`; a call without one is refused with UNAUTHENTICATED
//! (reason `TOKEN_REQUIRED`), one with another token with UNAUTHENTICATED (reason
//! `TOKEN_INVALID`), before anything else runs. `grpc.health.v1` and reflection stay
//! open, for probes.
//!
//! The token is the file's content without surrounding whitespace, compared in constant
//! time. The file is read again every few seconds, so a token rotated in a mounted
//! Secret takes effect without a restart; a file that cannot be read (or is empty)
//! keeps the token in effect and is logged once per change of state.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use subtle::ConstantTimeEq as _;
use tokio::sync::watch;
use tracing::{info, warn};

/// How often the token file is read again.
pub const RELOAD_EVERY: Duration = Duration::from_secs(5);

/// Why a token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file could not be read.
    #[error("failed to read token file {}", path.display())]
    Read {
        /// The token file's path.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// The file holds nothing but whitespace.
    #[error("token file {} is empty", path.display())]
    Empty {
        /// The token file's path.
        path: PathBuf,
    },
}

/// Why a call was not authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No `authorization` metadata.
    Missing,
    /// `authorization` metadata that is not `Bearer <the token>`.
    Invalid,
}

// === impl Refusal ===

impl Refusal {
    /// The ErrorInfo reason of the refusal.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Missing => "TOKEN_REQUIRED",
            Refusal::Invalid => "TOKEN_INVALID",
        }
    }
}

/// Reads a token file: its content without surrounding whitespace.
///
/// # Errors
/// A [`TokenError`] when the file cannot be read or is empty.
pub fn read(path: &Path) -> Result<Vec<u8>, TokenError> {
    let bytes = std::fs::read(path).map_err(|source| TokenError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let token = bytes.trim_ascii();
    if token.is_empty() {
        return Err(TokenError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(token.to_vec())
}

/// The token callers must send; shared by every connection.
#[derive(Debug, Clone)]
pub struct Token {
    path: PathBuf,
    value: Arc<RwLock<Vec<u8>>>,
}

// === impl Token ===

impl Token {
    /// The token in the file at `path`.
    ///
    /// # Errors
    /// A [`TokenError`] when the file cannot be read or is empty.
    pub fn load(path: &Path) -> Result<Token, TokenError> {
        Ok(Token {
            path: path.to_path_buf(),
            value: Arc::new(RwLock::new(read(path)?)),
        })
    }

    /// The file the token is read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The token's length in bytes (for a warning about short tokens; never the token).
    pub fn len(&self) -> usize {
        self.value.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether the token is empty (never, once loaded).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks a call's headers: `authorization: Bearer <token>` (the scheme in any
    /// case). The token is compared in constant time.
    ///
    /// # Errors
    /// The [`Refusal`] to answer.
    pub fn check(&self, headers: &http::HeaderMap) -> Result<(), Refusal> {
        let Some(value) = headers.get(http::header::AUTHORIZATION) else {
            return Err(Refusal::Missing);
        };
        let value = value.as_bytes().trim_ascii();
        let presented = match value.split_at_checked(7) {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case(b"bearer ") => rest.trim_ascii(),
            _ => return Err(Refusal::Invalid),
        };
        let token = self.value.read().unwrap_or_else(|e| e.into_inner());
        if bool::from(presented.ct_eq(token.as_slice())) {
            Ok(())
        } else {
            Err(Refusal::Invalid)
        }
    }

    /// Reads the file again every [`RELOAD_EVERY`] until `stop` turns true: a changed
    /// token takes effect at once; an unreadable or empty file keeps the token in effect.
    pub async fn reload(self, mut stop: watch::Receiver<bool>) {
        let mut failing = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(RELOAD_EVERY) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            match read(&self.path) {
                Ok(fresh) => {
                    if failing {
                        info!(path = %self.path.display(), "token file readable again");
                        failing = false;
                    }
                    let mut value = self.value.write().unwrap_or_else(|e| e.into_inner());
                    if *value != fresh {
                        *value = fresh;
                        info!(path = %self.path.display(), "token file changed; the new token is in effect");
                    }
                }
                Err(error) if !failing => {
                    failing = true;
                    warn!(%error, "token file unusable; the token read before stays in effect");
                }
                Err(_) => {}
            }
        }
    }
}

/// The metadata value that carries `token` (for clients such as `safewrite health`).
pub fn bearer(token: &[u8]) -> Option<http::HeaderValue> {
    let mut value = b"Bearer ".to_vec();
    value.extend_from_slice(token);
    http::HeaderValue::from_bytes(&value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(authorization: Option<&str>) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        if let Some(value) = authorization {
            headers.insert(http::header::AUTHORIZATION, value.parse().unwrap());
        }
        headers
    }

    #[test]
    fn only_the_bearer_token_of_the_file_passes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret-token\n").unwrap();
        let token = Token::load(&path).unwrap();
        assert_eq!(token.len(), 12);
        assert_eq!(token.check(&headers(Some("Bearer s3cret-token"))), Ok(()));
        assert_eq!(token.check(&headers(Some("bearer  s3cret-token "))), Ok(()));
        assert_eq!(token.check(&headers(None)), Err(Refusal::Missing));
        for wrong in [
            "Bearer s3cret-toke",
            "Bearer s3cret-token2",
            "s3cret-token",
            "Basic s3cret-token",
            "Bearer",
        ] {
            assert_eq!(
                token.check(&headers(Some(wrong))),
                Err(Refusal::Invalid),
                "{wrong}"
            );
        }
        assert_eq!(Refusal::Missing.reason(), "TOKEN_REQUIRED");
        assert_eq!(Refusal::Invalid.reason(), "TOKEN_INVALID");
    }

    #[test]
    fn an_empty_or_missing_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        assert!(matches!(Token::load(&path), Err(TokenError::Read { .. })));
        std::fs::write(&path, " \n").unwrap();
        assert!(matches!(Token::load(&path), Err(TokenError::Empty { .. })));
    }

    #[tokio::test(start_paused = true)]
    async fn a_rotated_token_takes_effect_and_an_emptied_file_keeps_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first").unwrap();
        let token = Token::load(&path).unwrap();
        let (stop_tx, stop) = watch::channel(false);
        let task = tokio::spawn(token.clone().reload(stop));
        std::fs::write(&path, "second").unwrap();
        tokio::time::sleep(RELOAD_EVERY + Duration::from_millis(10)).await;
        assert_eq!(token.check(&headers(Some("Bearer second"))), Ok(()));
        assert_eq!(
            token.check(&headers(Some("Bearer first"))),
            Err(Refusal::Invalid)
        );
        std::fs::write(&path, "").unwrap();
        tokio::time::sleep(RELOAD_EVERY).await;
        assert_eq!(token.check(&headers(Some("Bearer second"))), Ok(()));
        stop_tx.send(true).unwrap();
        task.await.unwrap();
    }
}
