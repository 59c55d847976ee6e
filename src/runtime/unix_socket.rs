//! The unix socket of the gRPC API (`--unix-socket`): bound with its mode and group
//! (`--unix-socket-mode`, `--unix-socket-group`) before it can accept a connection, in
//! place of a stale socket file left by a process that died but never of one a live
//! process serves.

use std::io;
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

/// Permission bits of the unix socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketMode(pub u32);

impl std::fmt::Display for SocketMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04o}", self.0)
    }
}

/// Parses `--unix-socket-mode`: octal permission bits such as 0660.
pub fn parse_mode(value: &str) -> Result<SocketMode, String> {
    let digits = value.strip_prefix("0o").unwrap_or(value);
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o777 && !digits.is_empty() => Ok(SocketMode(mode)),
        _ => Err(format!("{value:?} is not an octal mode such as 0660")),
    }
}

/// Why the unix socket could not be set up. Each is a configuration or environment
/// problem reported in one line at start.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The socket could not be bound, or its mode or group could not be set.
    #[error("failed to listen on unix socket {}", path.display())]
    Bind {
        /// The socket's path.
        path: PathBuf,
        /// Why it could not be bound or set up.
        #[source]
        source: io::Error,
    },
    /// The path is served by another live process.
    #[error("unix socket {} is in use by another process", path.display())]
    InUse {
        /// The socket's path.
        path: PathBuf,
    },
    /// `--unix-socket-group` names no group of /etc/group (and is not a number).
    #[error("unix socket group {0:?} is neither a group of /etc/group nor a numeric gid")]
    Group(String),
}

/// Binds the unix socket at `path`, replacing a stale socket file left by a process that
/// died, but never one a live process is serving. The socket gets `mode` and `group`
/// before it can accept a connection: it is bound under a temporary name in the same
/// directory, given its mode and group there, and renamed into place.
///
/// # Errors
/// [`SocketError::InUse`] when a live process serves `path`; [`SocketError::Bind`] when
/// it cannot be bound, given its mode or group, or moved into place.
pub async fn bind(
    path: &Path,
    mode: SocketMode,
    group: Option<u32>,
) -> Result<UnixListener, SocketError> {
    let failed = |source| SocketError::Bind {
        path: path.to_path_buf(),
        source,
    };
    if path.exists() {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(SocketError::InUse {
                path: path.to_path_buf(),
            });
        }
        std::fs::remove_file(path).map_err(failed)?;
    }
    let staged = staging_path(path);
    let bound_at = staged.as_deref().unwrap_or(path);
    if staged.is_some() {
        let _ = std::fs::remove_file(bound_at);
    }
    let listener = UnixListener::bind(bound_at).map_err(failed)?;
    let prepared = (|| {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(bound_at, std::fs::Permissions::from_mode(mode.0))?;
        if let Some(gid) = group {
            std::os::unix::fs::chown(bound_at, None, Some(gid))?;
        }
        if bound_at != path {
            std::fs::rename(bound_at, path)?;
        }
        Ok(())
    })();
    if let Err(source) = prepared {
        let _ = std::fs::remove_file(bound_at);
        return Err(failed(source));
    }
    Ok(listener)
}

/// A temporary name beside `path` to bind under, or `None` when it would not fit in a
/// socket address (then the socket is bound at `path` and its mode set at once).
fn staging_path(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let staged = path.with_file_name(format!(".{name}.{}.new", std::process::id()));
    // sun_path holds 108 bytes, the terminating NUL included.
    (staged.as_os_str().len() < 108).then_some(staged)
}

/// The gid of `group`: a number, or a name looked up in /etc/group.
///
/// # Errors
/// [`SocketError::Group`] when it is neither.
pub fn resolve_group(group: &str) -> Result<u32, SocketError> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(gid);
    }
    std::fs::read_to_string("/etc/group")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|line| {
                let mut fields = line.split(':');
                let name = fields.next()?;
                let gid = fields.nth(1)?;
                (name == group).then(|| gid.parse().ok()).flatten()
            })
        })
        .ok_or_else(|| SocketError::Group(group.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_numbers_or_names_of_etc_group() {
        assert_eq!(resolve_group("1234").unwrap(), 1234);
        assert_eq!(resolve_group("root").unwrap(), 0);
        assert!(matches!(
            resolve_group("no-such-group-here"),
            Err(SocketError::Group(_))
        ));
    }

    #[tokio::test]
    async fn the_unix_socket_has_its_mode_before_it_is_in_place() {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let gid = std::fs::metadata(dir.path()).unwrap().gid();
        let _listener = bind(&path, SocketMode(0o660), Some(gid)).await.unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o660);
        assert_eq!(meta.gid(), gid);
        // Nothing is left under the temporary name.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["s.sock"]);
        tokio::net::UnixStream::connect(&path)
            .await
            .expect("connect");
    }
}
