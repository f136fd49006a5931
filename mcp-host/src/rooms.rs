//! A chat's room for its `room` server: the mount, the check that the engine sees the rooms
//! where the daemon guesses, who the server runs as, and the room handed over to that user.
//!
//! Why: a server given its chat's room writes files the chat's file tools read, and reads
//! files the daemon put there, so it runs as the daemon's own user. A daemon running as root
//! (the compose service, CI) thus ran its room servers as uid 0: root in a container whose one
//! writable host folder is a chat's room, leaving root-owned files there. Now a root daemon
//! runs them as the pool's non-root user (`subagent.user`, 65532:65532 by default: the user of
//! every other sandbox container), never as uid 0, and hands the room over to that user first:
//! the room and everything in it are given to that uid:gid ([`hand_over`]), before the server
//! starts and again before each of its calls. The daemon, as root, still reads and writes
//! everything there, so none of its writers change; what it wrote since the last call (its
//! file tools' files, a received file or a task's returned file, made `0600` in `0700`
//! folders) is the server's at the server's next call. Handing over at the one moment a
//! server is about to act, rather than at each of the daemon's writers, covers every writer,
//! the ones to come included; a file the daemon writes during a call is the server's from the
//! next one. Only the rooms of chats whose room server is called are touched.
//!
//! A root daemon needs `CAP_CHOWN` to give the room away and `CAP_DAC_OVERRIDE` to go on
//! reading and writing it (compose.yaml adds both to its `NET_ADMIN`; a server's start says so
//! when it cannot). A daemon that is not root keeps running them as itself: its files are
//! already its own, and it could not give them away. (Running the compose daemon as a non-root
//! user instead is not possible as it stands: it installs the egress firewall's iptables
//! rules, which need `CAP_NET_ADMIN`, which Docker gives a non-root container user only as a
//! bounding capability, and `no-new-privileges` rules out file capabilities.)
//!
//! The walk is root's, in a folder a server writes, so it trusts nothing in there: it never
//! follows a symlink (each folder is opened relative to its parent's handle with
//! `O_NOFOLLOW`, anything else is changed with `AT_SYMLINK_NOFOLLOW`), leaves symlinks
//! themselves alone, stays on the room's filesystem, leaves a file with more than one link
//! alone (a hard link could name a file outside the room), and goes at most [`MAX_DEPTH`]
//! folders deep.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nexbot_core::ChatRef;
use nexbot_docker::{PoolConfig, ServiceMount, ServiceSpec};
use nexbot_mcp::{McpError, ServerConfig};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::process::{Gid, Uid};

use super::{Key, McpRooms, McpServers, ROLE};

/// Where a check container finds the folder of rooms.
const CHECK_TARGET: &str = "/rooms-check";

/// How many folders deep a room is handed over; deeper ones are left as they are (a server
/// can nest folders without end, and each level holds an open handle while it is walked).
pub const MAX_DEPTH: usize = 64;

/// A uid:gid a room is handed over to.
pub type Owner = (u32, u32);

impl McpServers {
    /// What a server with `room` gets: its chat's room (created when missing), or an empty
    /// folder for the probe; and the user to run as (never root: [`never_root`]).
    /// Nothing for any other server.
    pub(super) async fn room_mount(
        &self,
        config: &ServerConfig,
        key: &Key,
    ) -> Result<(Option<String>, Vec<ServiceMount>), McpError> {
        let Some(target) = config.room.clone() else { return Ok((None, Vec::new())) };
        let rooms = self.rooms.as_ref().ok_or_else(|| {
            McpError::Start(
                "it is given its chat's room (room), and this daemon has no rooms".into(),
            )
        })?;
        let mount = match &key.1 {
            None => ServiceMount::Empty { target },
            Some(chat) => {
                let on_engine = rooms.on_engine.as_ref().map_err(|why| {
                    McpError::Start(format!("its chat's room cannot be given to it: {why}"))
                })?;
                if rooms.check {
                    let checked =
                        self.rooms_checked.get_or_init(|| self.check_rooms(rooms, on_engine)).await;
                    checked.clone().map_err(|why| {
                        McpError::Start(format!("its chat's room cannot be given to it: {why}"))
                    })?;
                }
                nexbot_tools::rooms::ensure_room(&rooms.dir, chat).map_err(|e| {
                    McpError::Start(format!(
                        "the room of {chat} under {}: {e}",
                        rooms.dir.display()
                    ))
                })?;
                let source = on_engine.join(nexbot_tools::rooms::room_name(chat));
                ServiceMount::Folder { source, target }
            }
        };
        Ok((Some(rooms.user.clone()), vec![mount]))
    }

    /// Whether the engine sees `rooms.dir` at `on_engine`: a marker of random text written in a
    /// folder made there is read back by a throw-away container (the pool's image, its busybox)
    /// given that folder, as the user the rooms are given to (so the folder and the marker are
    /// that user's), and nothing else of the rooms. Said in the log either way.
    async fn check_rooms(
        &self,
        rooms: &McpRooms,
        on_engine: &std::path::Path,
    ) -> Result<(), String> {
        use tokio::io::AsyncReadExt;
        let token = uuid::Uuid::new_v4().simple().to_string();
        let name = format!(".engine-check-{token}");
        let folder = rooms.dir.join(&name);
        let give = |path: &Path| match self.room_owner {
            Some((uid, gid)) => std::os::unix::fs::chown(path, Some(uid), Some(gid)),
            None => Ok(()),
        };
        std::fs::create_dir_all(&folder)
            .and_then(|()| std::fs::write(folder.join("marker"), &token))
            .and_then(|()| give(&folder))
            .and_then(|()| give(&folder.join("marker")))
            .map_err(|e| {
                format!("could not write a check file into {}: {e}", rooms.dir.display())
            })?;
        let spec = ServiceSpec {
            role: ROLE.to_owned(),
            service: "mcp:rooms-check".to_owned(),
            name: "mcp-rooms-check".to_owned(),
            image: self.pool.config().image.clone(),
            command: vec!["/bin/busybox".into(), "cat".into(), format!("{CHECK_TARGET}/marker")],
            env: BTreeMap::new(),
            labels: BTreeMap::new(),
            user: Some(rooms.user.clone()),
            mounts: vec![ServiceMount::Folder {
                source: on_engine.join(&name),
                target: CHECK_TARGET.to_owned(),
            }],
            limits: Default::default(),
        };
        let read = async {
            let (service, mut io) =
                self.pool.start_service(&spec).await.map_err(|e| e.to_string())?;
            let mut seen = String::new();
            let read = io.stdout.read_to_string(&mut seen).await;
            service.stop().await;
            read.map_err(|e| e.to_string())?;
            Ok::<_, String>(seen)
        };
        let seen = tokio::time::timeout(Duration::from_secs(30), read)
            .await
            .unwrap_or_else(|_| Err("the check container did not answer in 30 s".into()));
        let _ = std::fs::remove_dir_all(&folder);
        let answer = match seen {
            Ok(seen) if seen.trim() == token => Ok(()),
            // Nothing there, or no such folder to give it (the engine's "bind source path does
            // not exist").
            Err(e) if !e.contains("does not exist") => {
                Err(format!("the check that the engine sees {} failed: {e}", rooms.dir.display()))
            }
            _ => Err(format!(
                "the Docker engine does not see {} at the same path (a check container could not \
                 read a file written there); run the daemon where the engine sees its workspace, \
                 or as a compose service",
                rooms.dir.display()
            )),
        };
        match &answer {
            Ok(()) => {
                tracing::info!(rooms = %rooms.dir.display(), "the Docker engine sees the chats' rooms at the daemon's path")
            }
            Err(why) => tracing::warn!("MCP servers with `room` cannot start: {why}"),
        }
        answer
    }
}

/// `rooms` as a room server may be given them: run as their `user` unless that is root, and
/// then as the pool's user, with the rooms handed over to it (the returned owner). A pool user
/// that is not a non-root number (refused when the pool started) leaves no room to give.
pub fn never_root(mut rooms: McpRooms, pool: &PoolConfig) -> (McpRooms, Option<Owner>) {
    let uid = rooms.user.split(':').next().and_then(|uid| uid.parse::<u32>().ok());
    if uid != Some(0) {
        return (rooms, None);
    }
    match pool.uid_gid() {
        Ok((uid, gid)) => {
            rooms.user = format!("{uid}:{gid}");
            (rooms, Some((uid, gid)))
        }
        Err(e) => {
            rooms.on_engine = Err(format!("a root daemon runs it as the pool's user: {e}"));
            (rooms, None)
        }
    }
}

/// `chat`'s room under `dir`, created when missing and handed over to `owner`; off the async
/// runtime (the walk is as long as the room). Fails only when the room itself cannot be.
pub async fn hand_over_room(dir: PathBuf, chat: ChatRef, owner: Owner) -> Result<(), McpError> {
    let walk = tokio::task::spawn_blocking(move || {
        let room = nexbot_tools::rooms::ensure_room(&dir, &chat)
            .map_err(|e| format!("the room of {chat} under {}: {e}", dir.display()))?;
        let done = hand_over(&room, owner).map_err(|e| {
            let hint = match e.kind() {
                std::io::ErrorKind::PermissionDenied => {
                    " (a root daemon needs CAP_CHOWN and CAP_DAC_OVERRIDE for its rooms: \
                     compose.yaml adds them; or run it as a non-root user)"
                }
                _ => "",
            };
            format!(
                "the room {} could not be given to the sandbox user {}:{}: {e}{hint}",
                room.display(),
                owner.0,
                owner.1
            )
        })?;
        if let Some(e) = &done.error {
            tracing::warn!(room = %room.display(), failed = done.failed, "some of a chat's room could not be given to its MCP server's user: {e}");
        }
        if done.changed > 0 || done.skipped > 0 {
            tracing::debug!(room = %room.display(), changed = done.changed, skipped = done.skipped, "a chat's room handed over to its MCP server's user");
        }
        Ok::<_, String>(())
    });
    match walk.await {
        Ok(answer) => answer.map_err(McpError::Start),
        Err(e) => Err(McpError::Start(format!("handing the room over failed: {e}"))),
    }
}

/// What [`hand_over`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HandedOver {
    /// Entries given to the owner (those already its own are not counted).
    pub changed: usize,
    /// Entries left alone on purpose: symlinks are not, but other filesystems, hard-linked
    /// files and folders deeper than [`MAX_DEPTH`] are.
    pub skipped: usize,
    /// Entries that could not be changed (gone meanwhile is not a failure), and the first
    /// reason.
    pub failed: usize,
    pub error: Option<String>,
}

/// Gives `room` (a real folder) and everything in it to `owner` (see the module
/// documentation). An error only when the room itself cannot be opened or changed.
pub fn hand_over(room: &Path, owner: Owner) -> std::io::Result<HandedOver> {
    let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
    let fd = rustix::fs::open(room, flags, Mode::empty())?;
    let stat = rustix::fs::fstat(&fd)?;
    let mut done = HandedOver::default();
    if !owned_by(&stat, owner) {
        rustix::fs::fchown(&fd, Some(uid(owner)), Some(gid(owner)))?;
        done.changed += 1;
    }
    walk(&fd, stat.st_dev, owner, 1, &mut done);
    Ok(done)
}

/// Hands over what is in the open folder `dir`, `depth` folders below the room.
fn walk(dir: &OwnedFd, dev: u64, owner: Owner, depth: usize, done: &mut HandedOver) {
    let fail = |done: &mut HandedOver, e: rustix::io::Errno| {
        if e != rustix::io::Errno::NOENT {
            done.failed += 1;
            done.error.get_or_insert_with(|| e.to_string());
        }
    };
    // The names first, so only this folder's handle stays open while its folders are walked.
    let names: Vec<CString> = match rustix::fs::Dir::read_from(dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|entry| entry.file_name().to_owned())
            .filter(|name| name.as_bytes() != b"." && name.as_bytes() != b"..")
            .collect(),
        Err(e) => return fail(done, e),
    };
    for name in names {
        let stat = match rustix::fs::statat(dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(e) => {
                fail(done, e);
                continue;
            }
        };
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Symlink => {}
            _ if stat.st_dev != dev => done.skipped += 1,
            FileType::Directory if depth >= MAX_DEPTH => done.skipped += 1,
            FileType::Directory => {
                let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
                let sub = rustix::fs::openat(dir, name.as_c_str(), flags, Mode::empty())
                    .and_then(|fd| rustix::fs::fstat(&fd).map(|stat| (fd, stat)));
                let (sub, stat) = match sub {
                    // Swapped for a mount of something else meanwhile: not the room's.
                    Ok((_, stat)) if stat.st_dev != dev => {
                        done.skipped += 1;
                        continue;
                    }
                    Ok(opened) => opened,
                    Err(e) => {
                        fail(done, e);
                        continue;
                    }
                };
                if !owned_by(&stat, owner) {
                    match rustix::fs::fchown(&sub, Some(uid(owner)), Some(gid(owner))) {
                        Ok(()) => done.changed += 1,
                        Err(e) => fail(done, e),
                    }
                }
                walk(&sub, dev, owner, depth + 1, done);
            }
            _ if stat.st_nlink > 1 => done.skipped += 1,
            _ if owned_by(&stat, owner) => {}
            _ => {
                let changed = rustix::fs::chownat(
                    dir,
                    name.as_c_str(),
                    Some(uid(owner)),
                    Some(gid(owner)),
                    AtFlags::SYMLINK_NOFOLLOW,
                );
                match changed {
                    Ok(()) => done.changed += 1,
                    Err(e) => fail(done, e),
                }
            }
        }
    }
}

fn owned_by(stat: &Stat, owner: Owner) -> bool {
    stat.st_uid == owner.0 && stat.st_gid == owner.1
}

fn uid(owner: Owner) -> Uid {
    Uid::from_raw(owner.0)
}

fn gid(owner: Owner) -> Gid {
    Gid::from_raw(owner.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn rooms(user: &str) -> McpRooms {
        McpRooms { user: user.into(), ..McpRooms::local(PathBuf::from("/data/chats")) }
    }

    #[test]
    fn a_root_user_becomes_the_pools_and_any_other_user_stays() {
        let pool = PoolConfig { user: "1234:5678".into(), ..PoolConfig::default() };
        for root in ["0", "0:0", "0:1000"] {
            let (given, owner) = never_root(rooms(root), &pool);
            assert_eq!(given.user, "1234:5678", "{root}");
            assert_eq!(owner, Some((1234, 5678)), "{root}");
            assert!(given.on_engine.is_ok());
        }
        let (given, owner) = never_root(rooms("1000:1000"), &pool);
        assert_eq!((given.user.as_str(), owner), ("1000:1000", None));
        let pool = PoolConfig { user: "65532".into(), ..PoolConfig::default() };
        assert_eq!(never_root(rooms("0:0"), &pool).0.user, "65532:65532");
        // A pool user that is root gives no room (the pool refuses it anyway).
        let pool = PoolConfig { user: "0".into(), ..PoolConfig::default() };
        let (given, owner) = never_root(rooms("0:0"), &pool);
        assert!(given.on_engine.is_err() && owner.is_none());
    }

    /// Run as root (the suite in CI): the room and what is in it are given away; a symlink
    /// out of the room, what it points to, and a hard-linked file are not.
    #[test]
    fn a_room_is_handed_over_without_following_a_link() {
        if !rustix::process::geteuid().is_root() {
            return; // only root can give files away
        }
        let base = std::env::temp_dir().join(format!("nxh-handover-{}", uuid::Uuid::new_v4()));
        let room = base.join("room");
        let outside = base.join("outside.txt");
        std::fs::create_dir_all(room.join("inbox/deep")).unwrap();
        std::fs::write(&outside, "not the room's").unwrap();
        std::fs::write(room.join("inbox/sent.txt"), "x").unwrap();
        std::fs::set_permissions(room.join("inbox/sent.txt"), PermissionsExt::from_mode(0o600))
            .unwrap();
        std::fs::write(room.join("inbox/deep/notes.md"), "y").unwrap();
        std::os::unix::fs::symlink(&outside, room.join("link")).unwrap();
        std::os::unix::fs::symlink(&base, room.join("inbox/up")).unwrap();
        std::fs::hard_link(&outside, room.join("hard")).unwrap();
        let owner = (4321, 4322);
        let done = hand_over(&room, owner).unwrap();
        assert_eq!((done.changed, done.skipped, done.failed), (5, 1, 0), "{done:?}");
        for path in ["", "inbox", "inbox/sent.txt", "inbox/deep", "inbox/deep/notes.md"] {
            let meta = std::fs::symlink_metadata(room.join(path)).unwrap();
            assert_eq!((meta.uid(), meta.gid()), owner, "{path}");
        }
        for path in [outside.clone(), base.clone(), room.join("link"), room.join("inbox/up")] {
            let meta = std::fs::symlink_metadata(&path).unwrap();
            assert_eq!(meta.uid(), 0, "{}", path.display());
        }
        // Again: nothing left to change.
        assert_eq!(hand_over(&room, owner).unwrap().changed, 0);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
