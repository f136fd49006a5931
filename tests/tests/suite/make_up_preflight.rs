//! `make up` on a machine that lacks something: it names every missing program with the command
//! that installs it before it builds or starts anything (issue 27: it failed in the middle of
//! the build); and a `NEXBOT_*` setting in `.env` that compose.yaml does not pass to the daemon
//! is reported instead of silently ignored. The real Makefile and script, on this machine with
//! programs taken off its PATH.

use nexbot_tests::TempDir;
use std::collections::HashSet;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repository root").to_owned()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// This machine's PATH as one folder of links to every program on it, but `hidden`: the
/// machine as it would be without those programs installed.
fn path_without(dir: &Path, hidden: &[&str]) -> String {
    let mut seen: HashSet<std::ffi::OsString> = HashSet::new();
    let path = std::env::var_os("PATH").expect("PATH");
    for folder in std::env::split_paths(&path) {
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if hidden.iter().any(|h| name == *h) || !seen.insert(name.clone()) {
                continue;
            }
            symlink(entry.path(), dir.join(&name)).unwrap();
        }
    }
    dir.display().to_string()
}

#[test]
fn make_up_names_every_missing_program_with_its_install_command_before_building() {
    let tmp = TempDir::new("nxd-preflight-path");
    let path = path_without(&tmp.0, &["docker-compose", "cargo"]);
    let out = Command::new("make")
        .args(["--no-print-directory", "-C"])
        .arg(repo())
        .args(["up", "COMPOSE=docker-compose", "BUSYBOX=/nonexistent/busybox"])
        .env("PATH", &path)
        // An engine that is not running.
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .stdin(Stdio::null())
        .output()
        .expect("run make up");
    let said = text(&out);
    assert!(!out.status.success(), "make up went on without docker-compose:\n{said}");
    for expected in [
        "make up: missing on this machine, so nothing was built or started",
        "docker-compose ('docker-compose version' does not run): apt-get install docker-compose",
        "a static busybox at /nonexistent/busybox (the sandbox's shell): apt-get install \
         busybox-static",
        "a Rust toolchain (cargo, Rust 1.85 or later): curl --proto '=https' --tlsv1.2 -sSf \
         https://sh.rustup.rs | sh",
        "a running Docker engine: docker is installed but the engine does not answer on \
         unix:///nonexistent/docker.sock; start it (systemctl start docker",
        "as root: apt-get update && apt-get install -y docker-compose busybox-static",
        "then run 'make up' again",
    ] {
        assert!(said.contains(expected), "missing {expected:?} in:\n{said}");
    }
    // Nothing was built: make never reached the image's cargo build or docker build.
    for started in ["cargo build", "docker build", "stage-host-image"] {
        assert!(!said.contains(started), "{started} ran:\n{said}");
    }
}

#[test]
fn this_machine_has_everything_make_up_needs() {
    // What `make test` needs anyway (it builds both images and runs compose).
    let out = Command::new("make")
        .args(["--no-print-directory", "-C"])
        .arg(repo())
        .arg("preflight")
        .stdin(Stdio::null())
        .output()
        .expect("run make preflight");
    assert!(out.status.success(), "make preflight:\n{}", text(&out));
}

#[test]
fn a_setting_in_dot_env_that_compose_does_not_pass_is_reported() {
    let tmp = TempDir::new("nxd-preflight-env");
    let env = tmp.0.join(".env");
    std::fs::write(
        &env,
        "# NEXBOT_COMMENTED=1\nNEXBOT_LLM_MODEL=passed-by-compose\nNEXBOT_AGENT__MAX_STEPS=3\n\
         NEXBOT_LLM__BASE_URL=http://daemon-name.example/v1\nNEXBOT_EMPTY=\n",
    )
    .unwrap();
    let check = |env: &Path| {
        let out = Command::new(repo().join("docker/preflight.sh"))
            .arg("env")
            .arg(repo().join("compose.yaml"))
            .arg(env)
            .output()
            .expect("run docker/preflight.sh env");
        assert!(out.status.success(), "the check stopped make up: {}", text(&out));
        text(&out)
    };
    // Written with this process's umask (0644 here): readable by others, which is said.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o644)).unwrap();
    let said = check(&env);
    assert!(
        said.contains("make up: .env can be read by every user of this machine (mode 644)"),
        "{said}"
    );
    std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o600)).unwrap();
    let said = check(&env);
    assert!(!said.contains("can be read"), "{said}");
    assert!(
        said.contains(
            "make up: NEXBOT_AGENT__MAX_STEPS in .env is not passed to the daemon; set it in \
             config.toml or add it to compose.yaml\n"
        ),
        "{said}"
    );
    assert!(
        said.contains(
            "make up: NEXBOT_LLM__BASE_URL in .env is not passed to the daemon; set it in \
             config.toml or add it to compose.yaml (compose passes it from NEXBOT_LLM_BASE_URL: \
             write that name in .env)"
        ),
        "{said}"
    );
    for quiet in ["NEXBOT_LLM_MODEL", "NEXBOT_EMPTY", "NEXBOT_COMMENTED"] {
        assert!(!said.contains(quiet), "{quiet} reported:\n{said}");
    }
    // Every setting .env.example documents reaches the daemon: filled in, none is reported.
    let example = std::fs::read_to_string(repo().join(".env.example")).unwrap();
    let filled: String = example
        .lines()
        .map(|l| match l.strip_suffix('=') {
            Some(name) if name.starts_with("NEXBOT_") => format!("{name}=x\n"),
            _ => format!("{l}\n"),
        })
        .collect();
    std::fs::write(&env, filled).unwrap();
    std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(check(&env), "", ".env.example documents a setting compose does not pass");
}

/// Issue 48 §1: `make up` builds nothing when the engine's images carry the key of this very
/// commit's sources (docker/source-key.sh, the images' `nexbot.source` label), and builds when
/// any differs, is missing or unlabelled, or the sources have uncommitted changes (no key).
#[test]
fn make_up_reuses_images_built_from_the_same_commit_and_rebuilds_otherwise() {
    let docker_here = Command::new("docker").arg("info").output().is_ok_and(|o| o.status.success());
    if !docker_here {
        assert!(std::env::var("CI").is_err(), "CI=true: this test needs the Docker engine");
        return;
    }
    // The key: the commit's tree, or nothing while something is not committed.
    let dir = TempDir::new("nxt-source-key");
    let root = dir.0.clone();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"])
            .args(args)
            .current_dir(&root)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let key = || {
        let out =
            Command::new(repo().join("docker/source-key.sh")).current_dir(&root).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(key(), "", "not a git checkout");
    git(&["init", "-q"]);
    std::fs::write(root.join("a.rs"), "fn main() {}\n").unwrap();
    git(&["add", "a.rs"]);
    git(&["commit", "-qm", "one"]);
    let tree = git(&["rev-parse", "HEAD^{tree}"]);
    assert_eq!(key(), tree);
    std::fs::write(root.join("a.rs"), "fn main() { }\n").unwrap();
    assert_eq!(key(), "", "an edit not committed");
    git(&["checkout", "-q", "a.rs"]);
    std::fs::write(root.join("b.rs"), "").unwrap();
    assert_eq!(key(), "", "a file not committed");
    std::fs::remove_file(root.join("b.rs")).unwrap();
    assert_eq!(key(), tree);

    // The engine's images against a key.
    let id = std::process::id();
    let tag = |n: u8| format!("nxt-current-{id}-{n}:dev");
    let build = |name: &str, label: Option<&str>| {
        let mut cmd = Command::new("docker");
        cmd.args(["build", "-q", "-t", name]);
        if let Some(label) = label {
            cmd.args(["--label", &format!("nexbot.source={label}")]);
        }
        let mut child = cmd.arg("-").stdin(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
        use std::io::Write as _;
        child.stdin.take().unwrap().write_all(b"FROM nexbot-subagent:dev\n").unwrap();
        assert!(child.wait().unwrap().success(), "docker build {name}");
    };
    let current = |key: &str, images: &[String]| {
        let out = Command::new(repo().join("docker/images-current.sh"))
            .arg(key)
            .args(images)
            .output()
            .unwrap();
        (out.status.success(), text(&out))
    };
    let key = format!("{tree}-image");
    build(&tag(1), Some(&key));
    build(&tag(2), Some(&key));
    build(&tag(3), Some(&format!("{tree}-test")));
    build(&tag(4), None);
    let (same, said) = current(&key, &[tag(1), tag(2)]);
    let others = [
        current(&key, &[tag(1), tag(3)]).0,
        current(&key, &[tag(1), tag(4)]).0,
        current(&key, &[tag(1), format!("nxt-current-{id}-missing:dev")]).0,
        current("", &[tag(1), tag(2)]).0,
        current(&format!("{tree}-other"), &[tag(1)]).0,
    ];
    for n in 1..=4 {
        let _ = Command::new("docker").args(["rmi", "-f", &tag(n)]).output();
    }
    assert!(same, "{said}");
    assert!(said.contains("not building them again"), "{said}");
    assert_eq!(
        others, [false; 5],
        "another build, the test build, no label, missing, no key, another key"
    );
}
