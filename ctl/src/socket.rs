//! Where the daemon's control socket is when `--socket` is not given.
//!
//! The daemon listens on `<data dir>/nexbot.sock`, the data directory being the directory of
//! its `config.toml`. `nexbot serve` finds its config through `--config`, else `NEXBOT_CONFIG`,
//! else `./config.toml`; so, without `--socket` or `NEXBOT_SOCKET`, the socket of the daemon
//! that the same shell would start is next to that config. The common cases then need no
//! flag: `cd` into the data directory, or export the same `NEXBOT_CONFIG` as the daemon's.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use nexbot_control::{SOCKET_ENV, SOCKET_FILE};

/// The variable `nexbot serve` reads its config path from.
pub const CONFIG_ENV: &str = "NEXBOT_CONFIG";

/// The socket to use: `flag`, else the environment's (see [`resolve`]).
pub fn socket_path(flag: Option<PathBuf>) -> PathBuf {
    resolve(flag, std::env::var_os(SOCKET_ENV), std::env::var_os(CONFIG_ENV))
}

/// `flag`, else `socket_env`, else `nexbot.sock` in the directory of `config_env`, else
/// `./nexbot.sock`. Empty variables count as unset (as an `export X=` would mean).
pub fn resolve(
    flag: Option<PathBuf>,
    socket_env: Option<OsString>,
    config_env: Option<OsString>,
) -> PathBuf {
    let set = |v: Option<OsString>| v.filter(|v| !v.is_empty());
    if let Some(path) = flag {
        return path;
    }
    if let Some(path) = set(socket_env) {
        return PathBuf::from(path);
    }
    let config = set(config_env).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("config.toml"));
    let dir = match config.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    dir.join(SOCKET_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<OsString> {
        Some(OsString::from(s))
    }

    #[test]
    fn the_flag_wins() {
        let got = resolve(Some("/a.sock".into()), os("/b.sock"), os("/c/config.toml"));
        assert_eq!(got, Path::new("/a.sock"));
    }

    #[test]
    fn then_the_socket_variable() {
        assert_eq!(resolve(None, os("/b.sock"), os("/c/config.toml")), Path::new("/b.sock"));
    }

    #[test]
    fn then_the_directory_of_the_daemons_config() {
        assert_eq!(resolve(None, None, os("/data/config.toml")), Path::new("/data/nexbot.sock"));
        assert_eq!(resolve(None, os(""), os("rel/my.toml")), Path::new("rel/nexbot.sock"));
    }

    #[test]
    fn else_the_current_directory() {
        assert_eq!(resolve(None, None, None), Path::new("./nexbot.sock"));
        assert_eq!(resolve(None, os(""), os("")), Path::new("./nexbot.sock"));
        assert_eq!(resolve(None, None, os("config.toml")), Path::new("./nexbot.sock"));
    }
}
