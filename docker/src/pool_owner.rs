//! Who owns a pool and its network, and whether that owner still lives.
//!
//! A pool belongs to one daemon. Every container and the network carry the labels of the
//! [`Owner`] that created them: an instance id chosen when the daemon (process) starts, plus
//! what names its process without doubt — pid, the process's start time (so a later process
//! that reuses the pid is not taken for it), the host's boot id and the pid namespace the pid
//! is counted in — and, when the daemon runs in a Docker container (compose), that container.
//!
//! Whether a recorded owner is alive is decided from facts, never from the labels alone:
//!
//! | recorded owner | alive when |
//! |---|---|
//! | this process | the pool run is still registered here (see [`RunRegistration`]) |
//! | another boot of the host | never |
//! | same pid namespace | `/proc/<pid>` exists with the recorded start time |
//! | our own container, another pid namespace | never (the container has restarted) |
//! | another container | that container is running (stopped: dead; unknown to the engine: as below) |
//! | elsewhere (another namespace, no container we know) | one of its containers still runs (a dead daemon's containers exit: their stdin closes) |
//! | no owner labels (an older nexbot) | the container still runs |
//!
//! A test fakes a dead owner with a pid that does not exist (above the kernel's `pid_max`
//! limit), and another live daemon with the identity of a child process ([`Owner::of_process`]).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use bollard::query_parameters::ListContainersOptionsBuilder;
use bollard::Docker;

use crate::error::PoolError;

/// The owning daemon instance's id.
pub const LABEL_OWNER: &str = "nexbot.owner";
/// The owner's pid, in the pid namespace of [`LABEL_OWNER_PIDNS`].
pub const LABEL_OWNER_PID: &str = "nexbot.owner.pid";
/// The owner process's start time, clock ticks after boot (`/proc/<pid>/stat`, field 22).
pub const LABEL_OWNER_START: &str = "nexbot.owner.start";
/// The host's boot id (`/proc/sys/kernel/random/boot_id`) when the owner started.
pub const LABEL_OWNER_BOOT: &str = "nexbot.owner.boot";
/// The inode of the owner's pid namespace (`/proc/self/ns/pid`).
pub const LABEL_OWNER_PIDNS: &str = "nexbot.owner.pidns";
/// The Docker container the owner runs in, when it runs in one.
pub const LABEL_OWNER_CONTAINER: &str = "nexbot.owner.container";

/// The identity of a daemon instance that owns pools and networks.
///
/// [`Owner::current`] is this process's; the fields are public so that a test can describe
/// another daemon (a dead one: a pid that cannot exist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Random id chosen when the instance starts.
    pub instance: String,
    pub pid: u32,
    /// Start time of the process, clock ticks after boot; with `pid` it names one process.
    pub start_ticks: u64,
    /// The host's boot id ("" when unknown).
    pub boot_id: String,
    /// The pid namespace `pid` is counted in ("" when unknown).
    pub pid_ns: String,
    /// Full id of the Docker container the process runs in, if any.
    pub container: Option<String>,
}

impl Owner {
    /// This process: one instance id per process, chosen on first use.
    pub fn current() -> &'static Owner {
        static CURRENT: OnceLock<Owner> = OnceLock::new();
        CURRENT.get_or_init(|| {
            let pid = std::process::id();
            Owner {
                instance: new_instance_id(),
                pid,
                start_ticks: proc_start_ticks(pid).unwrap_or(0),
                boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
                pid_ns: pid_namespace("self"),
                container: own_container_id(),
            }
        })
    }

    /// Another instance in this same process (a second daemon, as tests start them).
    pub fn another_instance(&self) -> Owner {
        Owner { instance: new_instance_id(), ..self.clone() }
    }

    /// The identity of the running process `pid` (as if it were a daemon), with a new
    /// instance id: tests use a child process to stand for another live daemon.
    pub fn of_process(pid: u32) -> std::io::Result<Owner> {
        let start_ticks = proc_start_ticks(pid)?;
        let here = Owner::current();
        let pid_ns = pid_namespace(&pid.to_string());
        Ok(Owner {
            instance: new_instance_id(),
            pid,
            start_ticks,
            boot_id: here.boot_id.clone(),
            pid_ns: if pid_ns.is_empty() { here.pid_ns.clone() } else { pid_ns },
            container: here.container.clone(),
        })
    }

    /// The labels that record this owner on a container or network.
    pub fn labels(&self) -> HashMap<String, String> {
        let mut labels = HashMap::from([
            (LABEL_OWNER.to_owned(), self.instance.clone()),
            (LABEL_OWNER_PID.to_owned(), self.pid.to_string()),
            (LABEL_OWNER_START.to_owned(), self.start_ticks.to_string()),
            (LABEL_OWNER_BOOT.to_owned(), self.boot_id.clone()),
            (LABEL_OWNER_PIDNS.to_owned(), self.pid_ns.clone()),
        ]);
        if let Some(container) = &self.container {
            labels.insert(LABEL_OWNER_CONTAINER.to_owned(), container.clone());
        }
        labels
    }

    /// The owner recorded in `labels`; `None` when they carry none (an older nexbot, or
    /// something nexbot did not create).
    pub fn from_labels(labels: &HashMap<String, String>) -> Option<Owner> {
        Some(Owner {
            instance: labels.get(LABEL_OWNER)?.clone(),
            pid: labels.get(LABEL_OWNER_PID)?.parse().ok()?,
            start_ticks: labels.get(LABEL_OWNER_START)?.parse().ok()?,
            boot_id: labels.get(LABEL_OWNER_BOOT).cloned().unwrap_or_default(),
            pid_ns: labels.get(LABEL_OWNER_PIDNS).cloned().unwrap_or_default(),
            container: labels.get(LABEL_OWNER_CONTAINER).cloned(),
        })
    }

    /// `true` when both name the same process (whatever their instance ids).
    pub fn same_process(&self, other: &Owner) -> bool {
        self.pid == other.pid
            && self.start_ticks == other.start_ticks
            && self.boot_id == other.boot_id
            && self.pid_ns == other.pid_ns
    }

    /// "instance 3f2a… (pid 1234, container 0123456789ab)", for error messages.
    pub fn describe(&self) -> String {
        let short = |s: &str| s.chars().take(12).collect::<String>();
        match &self.container {
            Some(c) => format!(
                "instance {} (pid {}, container {})",
                short(&self.instance),
                self.pid,
                short(c)
            ),
            None => format!("instance {} (pid {})", short(&self.instance), self.pid),
        }
    }
}

fn new_instance_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_owned()).unwrap_or_default()
}

/// The inode of `/proc/<pid>/ns/pid` ("pid:[4026531836]" → "4026531836"), "" when unknown.
fn pid_namespace(pid: &str) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/pid"))
        .ok()
        .and_then(|target| {
            let text = target.to_string_lossy().into_owned();
            text.strip_prefix("pid:[")?.strip_suffix(']').map(str::to_owned)
        })
        .unwrap_or_default()
}

/// Field 22 of `/proc/<pid>/stat`: when the process started, in clock ticks after boot.
pub(crate) fn proc_start_ticks(pid: u32) -> std::io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_start_ticks(&stat).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("/proc/{pid}/stat: {stat}"))
    })
}

fn parse_start_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) is in parentheses and may hold spaces and ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields 3, 4, … follow; the start time is field 22, the 20th of them.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The full id of the Docker container this process runs in, read from the kernel (no engine
/// call, so no race with the engine's own bookkeeping): Docker bind-mounts the container's
/// `hostname`, `hosts` and `resolv.conf` from `…/containers/<id>/` — also under host networking —
/// which `/proc/self/mountinfo` shows; failing that, a cgroup path naming the id
/// (`/docker/<id>`, `docker-<id>.scope`) in `/proc/self/cgroup` (cgroup v1, or v2 without a
/// private cgroup namespace). `None` outside a container, or in one that shows neither.
pub fn own_container_id() -> Option<String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    container_from_mountinfo(&mountinfo).or_else(|| {
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        container_from_cgroup(&cgroup)
    })
}

fn is_container_id(id: &str) -> bool {
    id.len() == 64 && id.chars().all(|c| c.is_ascii_hexdigit())
}

fn container_from_mountinfo(mountinfo: &str) -> Option<String> {
    mountinfo.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let root = fields.nth(3)?;
        let mount_point = fields.next()?;
        let file = ["/etc/hostname", "/etc/hosts", "/etc/resolv.conf"]
            .into_iter()
            .find(|p| *p == mount_point)?
            .rsplit('/')
            .next()?;
        let id = root.strip_suffix(file)?.strip_suffix('/')?.rsplit('/').next()?;
        is_container_id(id).then(|| id.to_owned())
    })
}

fn container_from_cgroup(cgroup: &str) -> Option<String> {
    cgroup.lines().find_map(|line| {
        let path = line.splitn(3, ':').nth(2)?;
        path.split('/').find_map(|part| {
            let id = part.strip_prefix("docker-").and_then(|p| p.strip_suffix(".scope"));
            let id = id.unwrap_or(part);
            is_container_id(id).then(|| id.to_owned())
        })
    })
}

/// Whether a recorded owner still runs, and why we think so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Liveness {
    Live(String),
    Dead(String),
}

/// What the process facts alone say about `recorded`, seen from `here`; `None` when only the
/// Docker engine can tell (another pid namespace).
fn process_verdict(
    recorded: &Owner,
    here: &Owner,
    start_of: impl Fn(u32) -> Option<u64>,
) -> Option<Liveness> {
    if !recorded.boot_id.is_empty() && !here.boot_id.is_empty() && recorded.boot_id != here.boot_id
    {
        return Some(Liveness::Dead("the host has restarted since it started".into()));
    }
    if recorded.pid_ns == here.pid_ns {
        return Some(match start_of(recorded.pid) {
            Some(start) if start == recorded.start_ticks => {
                Liveness::Live(format!("its process {} is running", recorded.pid))
            }
            _ => Liveness::Dead(format!("its process {} has exited", recorded.pid)),
        });
    }
    if recorded.container.is_some() && recorded.container == here.container {
        return Some(Liveness::Dead("its container (this one) has restarted since".into()));
    }
    None
}

/// Whether `recorded` (not this process: see [`owner_of_run_is_live`]) is alive.
pub(crate) async fn liveness(docker: &Docker, recorded: &Owner) -> Result<Liveness, PoolError> {
    let here = Owner::current();
    if let Some(verdict) = process_verdict(recorded, here, |pid| proc_start_ticks(pid).ok()) {
        return Ok(verdict);
    }
    if let Some(container) = &recorded.container {
        match docker.inspect_container(container, None).await {
            Ok(info) => {
                let short: String = container.chars().take(12).collect();
                return Ok(if info.state.and_then(|s| s.running) == Some(true) {
                    Liveness::Live(format!("its container {short} is running"))
                } else {
                    Liveness::Dead(format!("its container {short} has stopped"))
                });
            }
            // Unknown to the engine: gone, or a container the owner could not name rightly
            // (a daemon that cannot tell its own container, issue 27): its containers tell.
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {}
            Err(e) => return Err(PoolError::docker("inspect the owner's container", e)),
        }
    }
    // Nothing to look at but its containers: a dead daemon's containers exit on their own.
    let filters = HashMap::from([
        ("label", vec![format!("{LABEL_OWNER}={}", recorded.instance)]),
        ("status", vec!["running".to_owned()]),
    ]);
    let options = ListContainersOptionsBuilder::default().filters(&filters).build();
    let running = docker
        .list_containers(Some(options))
        .await
        .map_err(|e| PoolError::docker("list the owner's containers", e))?;
    Ok(if running.is_empty() {
        Liveness::Dead("none of its containers is running".into())
    } else {
        Liveness::Live(format!("{} of its containers are running", running.len()))
    })
}

/// A pool run alive in this process.
struct LiveRun {
    run: String,
    pool: String,
    owner: Owner,
}

/// The pool runs (one per [`crate::Pool::start`]) alive in this process: in this process,
/// liveness is known exactly.
static LIVE_RUNS: Mutex<Vec<LiveRun>> = Mutex::new(Vec::new());

fn live_runs() -> std::sync::MutexGuard<'static, Vec<LiveRun>> {
    LIVE_RUNS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A pool run registered as alive in this process until dropped (with its pool).
#[derive(Debug)]
pub(crate) struct RunRegistration {
    run: String,
}

impl RunRegistration {
    /// Registers run `run` of pool `name` for `owner`; refused while another run of that
    /// name is alive in this process.
    pub(crate) fn register(name: &str, run: &str, owner: &Owner) -> Result<Self, PoolError> {
        let mut runs = live_runs();
        if let Some(other) = runs.iter().find(|r| r.pool == name) {
            return Err(PoolError::Owned {
                what: format!("pool {name:?}"),
                owner: other.owner.describe(),
                why: format!("its run {} is alive in this process", short(&other.run)),
                fix: "shut that pool down first, or give this one another name".into(),
            });
        }
        runs.push(LiveRun { run: run.to_owned(), pool: name.to_owned(), owner: owner.clone() });
        Ok(Self { run: run.to_owned() })
    }
}

impl Drop for RunRegistration {
    fn drop(&mut self) {
        live_runs().retain(|r| r.run != self.run);
    }
}

fn short(id: &str) -> String {
    id.chars().take(12).collect()
}

/// Whether the pool run `run` recorded with owner `recorded` is alive: exactly, when the
/// owner is this process; else by the owner's liveness.
pub(crate) async fn owner_of_run_is_live(
    docker: &Docker,
    recorded: &Owner,
    run: &str,
) -> Result<Liveness, PoolError> {
    if recorded.same_process(Owner::current()) {
        return Ok(if live_runs().iter().any(|r| r.run == run) {
            Liveness::Live("its pool is running in this process".into())
        } else {
            Liveness::Dead("its pool in this process was dropped".into())
        });
    }
    liveness(docker, recorded).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_field_22_even_with_odd_command_names() {
        let stat = "4242 (a b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 \
                    123 456";
        assert_eq!(parse_start_ticks(stat), Some(987_654));
        assert_eq!(parse_start_ticks("garbage"), None);
        let me = proc_start_ticks(std::process::id()).unwrap();
        assert!(me > 0);
        assert_eq!(Owner::current().start_ticks, me);
    }

    #[test]
    fn labels_round_trip_and_name_the_process() {
        let owner = Owner { container: Some("c".repeat(64)), ..Owner::current().clone() };
        assert_eq!(Owner::from_labels(&owner.labels()), Some(owner.clone()));
        assert!(Owner::from_labels(&HashMap::new()).is_none());
        let other = owner.another_instance();
        assert_ne!(other.instance, owner.instance);
        assert!(other.same_process(&owner));
        assert!(owner.describe().contains(&format!("pid {}", owner.pid)));
        assert!(owner.describe().contains("container cccccccccccc"));
    }

    #[test]
    fn the_container_is_read_from_its_etc_mounts_or_its_cgroup() {
        let id = "0123456789abcdef".repeat(4);
        let mountinfo = format!(
            "100 90 0:50 / / rw - overlay overlay rw\n\
             101 100 8:1 /var/lib/docker/containers/{id}/hostname /etc/hostname rw - ext4 /dev/sda1 rw\n"
        );
        assert_eq!(container_from_mountinfo(&mountinfo), Some(id.clone()));
        // Another data root on its own filesystem: the root is relative to it.
        let hosts =
            format!("102 100 8:2 /containers/{id}/hosts /etc/hosts rw - ext4 /dev/sdb rw\n");
        assert_eq!(container_from_mountinfo(&hosts), Some(id.clone()));
        assert_eq!(container_from_mountinfo("100 90 0:50 / / rw - overlay overlay rw\n"), None);
        // A hostname file of another shape is not taken for an id.
        let odd = "101 100 8:1 /srv/hostname /etc/hostname rw - ext4 /dev/sda1 rw\n";
        assert_eq!(container_from_mountinfo(odd), None);
        // What this engine (20.10, cgroup v1) shows, and systemd's cgroup driver.
        let v1 = format!("9:name=systemd:/docker/{id}\n4:memory:/docker/{id}\n0::/docker/{id}\n");
        assert_eq!(container_from_cgroup(&v1), Some(id.clone()));
        let systemd = format!("0::/system.slice/docker-{id}.scope\n");
        assert_eq!(container_from_cgroup(&systemd), Some(id));
        // cgroup v2 with a private cgroup namespace names nothing.
        assert_eq!(container_from_cgroup("0::/\n"), None);
    }

    #[test]
    fn process_facts_decide_within_a_namespace_and_across_boots() {
        let here = Owner {
            instance: "me".into(),
            pid: 10,
            start_ticks: 100,
            boot_id: "boot-a".into(),
            pid_ns: "1".into(),
            container: None,
        };
        let other = Owner { instance: "x".into(), pid: 20, start_ticks: 200, ..here.clone() };
        let alive = |pid| (pid == 20).then_some(200);
        let live = |v: Option<Liveness>| matches!(v, Some(Liveness::Live(_)));
        let dead = |v: Option<Liveness>| matches!(v, Some(Liveness::Dead(_)));
        assert!(live(process_verdict(&other, &here, alive)));
        assert!(dead(process_verdict(&other, &here, |_| None)), "no such pid");
        assert!(dead(process_verdict(&other, &here, |_| Some(999))), "pid reused");
        let rebooted = Owner { boot_id: "boot-b".into(), ..other.clone() };
        assert!(dead(process_verdict(&rebooted, &here, alive)));
        // Another pid namespace: our own container restarted, or the engine must tell.
        let in_container = Owner { container: Some("c1".into()), ..here.clone() };
        let before_restart =
            Owner { pid_ns: "2".into(), container: Some("c1".into()), ..other.clone() };
        assert!(dead(process_verdict(&before_restart, &in_container, alive)));
        let elsewhere = Owner { pid_ns: "3".into(), container: Some("c2".into()), ..other };
        assert_eq!(process_verdict(&elsewhere, &in_container, alive), None);
    }

    #[test]
    fn one_live_run_per_pool_name_in_a_process() {
        let me = Owner::current();
        let first = RunRegistration::register("nxp-unit-reg", "run-1", me).unwrap();
        let err = RunRegistration::register("nxp-unit-reg", "run-2", me).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("run-1") && text.contains(&format!("pid {}", me.pid)), "{text}");
        let other_name = RunRegistration::register("nxp-unit-reg-2", "run-3", me).unwrap();
        drop(first);
        let again = RunRegistration::register("nxp-unit-reg", "run-4", me).unwrap();
        drop((again, other_name));
    }
}
