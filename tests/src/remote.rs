//! A Docker engine on "another machine": a `dockerd` in a network namespace this test made,
//! reachable from here only over TCP with mutual TLS (certificates the test makes).
//!
//! Why a namespace: it plays a remote host well (its own interfaces, routes, bridges and
//! firewall; the only way in is a veth pair whose two addresses the test chose), and a second
//! `dockerd` in the machine's own namespace would delete its `docker0` (ENVIRONMENT.md). The
//! engine also listens on a socket in its folder: that is the test's look at the remote host
//! (what a `docker` on that machine would see), never given to the daemon under test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The files of one side of mutual TLS (PEM).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A remote engine of the test's own. Stopped, its namespace deleted and its folder removed
/// on drop.
#[derive(Debug)]
pub struct RemoteHost {
    dir: PathBuf,
    namespace: String,
    /// This machine's end of the veth pair (the only way to the engine).
    link: String,
    /// The engine's address inside its namespace.
    pub address: std::net::Ipv4Addr,
    /// This machine's end of the veth pair (what the remote host would call the daemon's).
    pub peer: std::net::Ipv4Addr,
    pub port: u16,
    /// What the daemon is given: the CA of the engine's certificate, its own client pair.
    pub client: TlsFiles,
    /// A client pair signed by another CA (the engine must refuse it), and that CA.
    pub stranger: TlsFiles,
    /// The SHA-256 of the engine's certificate (DER), as `sha256:<hex>`.
    pub server_fingerprint: String,
    child: Option<Child>,
}

fn run(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().expect("run a setup command");
    assert!(
        out.status.success(),
        "setting up the remote engine: {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, and certificates it signs.
struct Ca {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Ca {
    fn new(name: &str) -> Self {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        params.key_usages =
            vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
        let key = rcgen::KeyPair::generate().expect("a CA key");
        let cert = params.self_signed(&key).expect("a CA certificate");
        Self { cert, key }
    }

    /// A certificate for `name` (an IP address for a server), and its key.
    fn sign(&self, name: &str, server: bool) -> (rcgen::Certificate, rcgen::KeyPair) {
        let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).expect("params");
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![match server {
            true => rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            false => rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        }];
        let key = rcgen::KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &self.cert, &self.key).expect("signed");
        (cert, key)
    }

    /// Writes the CA, a certificate for `who` and its key; returns the files and the
    /// certificate's DER.
    fn write_pair(&self, dir: &Path, name: &str, who: &str, server: bool) -> (TlsFiles, Vec<u8>) {
        let (cert, key) = self.sign(who, server);
        let files = TlsFiles {
            ca: dir.join(format!("{name}-ca.pem")),
            cert: dir.join(format!("{name}-cert.pem")),
            key: dir.join(format!("{name}-key.pem")),
        };
        std::fs::write(&files.ca, self.cert.pem()).expect("write the CA");
        std::fs::write(&files.cert, cert.pem()).expect("write a certificate");
        std::fs::write(&files.key, key.serialize_pem()).expect("write a key");
        (files, cert.der().to_vec())
    }
}

impl RemoteHost {
    /// Starts an engine in a namespace of its own, its files under `/tmp/nxr-<pid>-<n>`.
    pub fn start() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tag = format!("{}{n}", pid % 100_000);
        let dir = std::env::temp_dir().join(format!("nxr-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the remote engine's folder");
        // A /30 of its own in 10.213.0.0/16 (pid and counter spread parallel runs).
        let net = (pid.wrapping_mul(7).wrapping_add(n * 13) % 16_000) * 4;
        let (hi, lo) = ((net >> 8) as u8, (net & 0xff) as u8);
        let address = std::net::Ipv4Addr::new(10, 213, hi, lo + 2);
        let here = std::net::Ipv4Addr::new(10, 213, hi, lo + 1);
        let namespace = format!("nxr-{tag}");
        let (outer, inner) = (format!("nxr{tag}h"), format!("nxr{tag}r"));
        let _ =
            Command::new("ip").args(["netns", "del", &namespace]).stderr(Stdio::null()).status();
        run(&["ip", "netns", "add", &namespace]);
        run(&["ip", "link", "add", &outer, "type", "veth", "peer", "name", &inner]);
        run(&["ip", "link", "set", &inner, "netns", &namespace]);
        run(&["ip", "addr", "add", &format!("{here}/30"), "dev", &outer]);
        run(&["ip", "link", "set", &outer, "up"]);
        let inside = |args: &[&str]| {
            let mut all = vec!["ip", "netns", "exec", &namespace];
            all.extend_from_slice(args);
            run(&all);
        };
        inside(&["ip", "addr", "add", &format!("{address}/30"), "dev", &inner]);
        inside(&["ip", "link", "set", &inner, "up"]);
        inside(&["ip", "link", "set", "lo", "up"]);
        let ca = Ca::new("nexbot test engine CA");
        let (server, der) = ca.write_pair(&dir, "server", &address.to_string(), true);
        let (client, _) = ca.write_pair(&dir, "client", "nexbot daemon", false);
        let (stranger, _) =
            Ca::new("someone else's CA").write_pair(&dir, "stranger", "intruder", false);
        let digest = <sha2::Sha256 as sha2::Digest>::digest(&der);
        let server_fingerprint =
            format!("sha256:{}", digest.iter().map(|b| format!("{b:02x}")).collect::<String>());
        let mut engine = Self {
            dir,
            namespace,
            link: outer.clone(),
            address,
            peer: here,
            port: 2376,
            client,
            stranger,
            server_fingerprint,
            child: None,
        };
        engine.boot(&server);
        engine
    }

    /// `tcp://ADDRESS:PORT`, for `sandbox.engine`.
    pub fn url(&self) -> String {
        format!("tcp://{}:{}", self.address, self.port)
    }

    /// The daemon's `[sandbox]` for this engine, presenting `client` and trusting `ca`.
    pub fn sandbox_with(&self, client: &TlsFiles, ca: &Path) -> nexbot_docker::SandboxConfig {
        nexbot_docker::SandboxConfig {
            engine: Some(self.url()),
            tls_ca: Some(ca.to_owned()),
            tls_cert: Some(client.cert.clone()),
            tls_key: Some(client.key.clone()),
            ..nexbot_docker::SandboxConfig::default()
        }
    }

    /// The daemon's `[sandbox]` settings for this engine as its environment
    /// (`NEXBOT_SANDBOX__ENGINE` and the three TLS files), for a `nexbot` the test starts.
    pub fn daemon_env(&self) -> Vec<(String, String)> {
        let path = |p: &Path| p.display().to_string();
        [
            ("NEXBOT_SANDBOX__ENGINE", self.url()),
            ("NEXBOT_SANDBOX__TLS_CA", path(&self.client.ca)),
            ("NEXBOT_SANDBOX__TLS_CERT", path(&self.client.cert)),
            ("NEXBOT_SANDBOX__TLS_KEY", path(&self.client.key)),
        ]
        .map(|(name, value)| (name.to_owned(), value))
        .to_vec()
    }

    /// The daemon's `[sandbox]` for this engine, with the client pair it trusts.
    pub fn sandbox(&self) -> nexbot_docker::SandboxConfig {
        self.sandbox_with(&self.client, &self.client.ca)
    }

    /// A listener on `addr` inside the remote host's network namespace: a server "on that
    /// machine" (its pool network's gateway is an address only there), served by this
    /// process. The socket stays in the namespace it was made in; only the short-lived
    /// thread that makes it enters it.
    pub fn listen(&self, addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
        let namespace = PathBuf::from("/run/netns").join(&self.namespace);
        std::thread::spawn(move || {
            let fd = std::fs::File::open(&namespace)?;
            rustix::thread::move_into_link_name_space(
                std::os::fd::AsFd::as_fd(&fd),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )?;
            let listener = std::net::TcpListener::bind(addr)?;
            listener.set_nonblocking(true)?;
            Ok(listener)
        })
        .join()
        .expect("the thread that binds in the remote host's namespace")
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("docker.sock")
    }

    fn boot(&mut self, server: &TlsFiles) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("dockerd.log"))
            .expect("the engine's log");
        // A mount namespace of its own with a /sys of its network namespace (bridges are read
        // there), the machine's cgroups kept under it.
        const SCRIPT: &str = r#"set -e
aside="$1/cgroup"; mkdir -p "$aside"
mount --rbind /sys/fs/cgroup "$aside"
mount -t sysfs sysfs /sys
mount --move "$aside" /sys/fs/cgroup
shift
exec dockerd "$@""#;
        let d = |name: &str| self.dir.join(name).display().to_string();
        let tcp = format!("tcp://{}:{}", self.address, self.port);
        let unix = format!("unix://{}", self.socket().display());
        let mut child = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.namespace))
            .args(["unshare", "--mount", "--propagation", "private", "sh", "-c", SCRIPT, "sh"])
            .arg(self.dir.display().to_string())
            .args(["--data-root", &d("data"), "--exec-root", &d("exec")])
            .args(["--pidfile", &d("docker.pid"), "-H", &unix, "-H", &tcp, "--tlsverify"])
            .args(["--tlscacert", &server.ca.display().to_string()])
            .args(["--tlscert", &server.cert.display().to_string()])
            .args(["--tlskey", &server.key.display().to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("run nsenter (util-linux) and dockerd");
        let host = format!("unix://{}", self.socket().display());
        crate::engine::wait_answering(&mut child, &host, &self.dir, "the remote dockerd");
        self.child = Some(child);
    }

    /// The last lines of the engine's own log.
    pub fn log_tail(&self) -> String {
        crate::engine::dockerd_log_tail(&self.dir)
    }

    /// Runs the `docker` CLI on the remote host (through its local socket); its stdout when
    /// it succeeded.
    pub fn docker(&self, args: &[&str]) -> Option<String> {
        crate::engine::docker_at(&format!("unix://{}", self.socket().display()), args)
    }

    /// Every file where the engine keeps its containers (their configs, logs and state: the
    /// data root's `containers`, the exec root) whose bytes contain `needle`: the remote
    /// host's disk, as far as anything of a running task is written there. (The images'
    /// layers are copies of this machine's images.)
    pub fn files_containing(&self, needle: &[u8]) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut stack = vec![self.dir.join("data/containers"), self.dir.join("exec")];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let Ok(kind) = entry.file_type() else { continue };
                if kind.is_dir() {
                    stack.push(entry.path());
                } else if kind.is_file() {
                    let Ok(bytes) = std::fs::read(entry.path()) else { continue };
                    if bytes.windows(needle.len()).any(|w| w == needle) {
                        found.push(entry.path());
                    }
                }
            }
        }
        found
    }

    /// Cuts the only link to the remote host (its cable pulled: nothing answers, nothing is
    /// refused by the far end).
    pub fn cut(&self) {
        run(&["ip", "link", "set", &self.link, "down"]);
    }

    /// Puts the link back after [`Self::cut`].
    pub fn mend(&self) {
        run(&["ip", "link", "set", &self.link, "up"]);
    }

    /// Stops the engine gracefully (SIGTERM), as a restart of the remote host's service would.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        if let Ok(pid) = std::fs::read_to_string(self.dir.join("docker.pid")) {
            let _ = Command::new("kill").args(["-TERM", pid.trim()]).status();
        }
        let start = Instant::now();
        while child.try_wait().ok().flatten().is_none() {
            if start.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts it again after [`Self::stop`].
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the engine still runs");
        let server = TlsFiles {
            ca: self.dir.join("server-ca.pem"),
            cert: self.dir.join("server-cert.pem"),
            key: self.dir.join("server-key.pem"),
        };
        self.boot(&server);
    }
}

/// The variable that runs pool tests against a remote engine: `remote` (CI's remote leg,
/// `tests/run-suites.sh`) puts every pool `pool_common::setup` makes on [`shared`]'s engine.
pub const TEST_ENGINE_ENV: &str = "NEXBOT_TEST_ENGINE";

/// Whether [`TEST_ENGINE_ENV`] says `remote`. Any other value is refused: a typo must not
/// quietly test the local engine instead.
pub fn remote_leg() -> bool {
    match std::env::var(TEST_ENGINE_ENV).as_deref() {
        Ok("remote") => true,
        Ok("") | Ok("local") | Err(_) => false,
        Ok(other) => panic!("{TEST_ENGINE_ENV}={other:?}: say `remote` or leave it unset"),
    }
}

/// The remote host of this test process's remote leg: started on first use, one for every
/// test of the process (each would otherwise pay an engine's start), and stopped, its
/// namespace and folder removed, by a watcher once the process has ended (a `static` is
/// never dropped).
pub fn shared() -> &'static RemoteHost {
    static SHARED: std::sync::OnceLock<RemoteHost> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| {
        let host = RemoteHost::start();
        host.remove_at_exit();
        host
    })
}

impl RemoteHost {
    /// A watcher, detached into its own process group, that waits for this process to end,
    /// then stops the engine (its containers with it), deletes the namespace and the folder:
    /// what `Drop` does for a host that is dropped.
    fn remove_at_exit(&self) {
        use std::os::unix::process::CommandExt;
        const SCRIPT: &str = r#"
while kill -0 "$1" 2>/dev/null; do sleep 1; done
docker -H "unix://$2/docker.sock" ps -aq | xargs -r docker -H "unix://$2/docker.sock" rm -f >/dev/null 2>&1
pid=$(cat "$2/docker.pid" 2>/dev/null) && kill -TERM "$pid" 2>/dev/null
for try in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
ip netns del "$3" 2>/dev/null
rm -rf "$2"
"#;
        let spawned = Command::new("sh")
            .args(["-c", SCRIPT, "nxr-watcher", &std::process::id().to_string()])
            .arg(&self.dir)
            .arg(&self.namespace)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        if let Err(e) = spawned {
            eprintln!("cannot start the watcher that removes {} at exit: {e}", self.dir.display());
        }
    }
}

impl Drop for RemoteHost {
    fn drop(&mut self) {
        if self.child.is_some() {
            crate::engine::remove_all_containers(&format!("unix://{}", self.socket().display()));
            self.stop();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.namespace]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
