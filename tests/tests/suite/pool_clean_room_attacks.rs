//! The clean room's escapes, tried as an attacker would on ONE reused pool container (real
//! image, real pool, scripted LLM; issue 24). Each plants something in task 1 that the scrub of
//! an earlier design let through, lets task 2 hold a canary secret, and looks from task 3:
//!
//! - a thread group whose leader thread exited: `/proc/<pid>/stat` says `Z`, so a scrub that
//!   skips zombies took it for dead while its other thread read later tasks' environments —
//!   planted by a static helper baked into an image, and by the stock image's busybox alone
//!   (machine code written into a child through `/proc/<pid>/mem` with `dd`);
//! - POSIX message queues and System V IPC objects, which outlive every process;
//! - pid 1, which nothing inside the container can kill: it must be the (non-dumpable)
//!   subagent, not an init whose memory a command can read and rewrite.

use crate::pool_clean_room::{run_command, CANARY};
use crate::pool_common;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use nexbot_docker::{Pool, PoolConfig};
use nexbot_protocol::SecretMap;
use pool_common::{llm_on, setup};
use secrecy::SecretString;
use tokio::io::AsyncReadExt;

/// The attacker's helper, in C (`pool_clean_room_implant.c`): see its header for its modes.
const HELPER_SOURCE: &str = include_str!("pool_clean_room_implant.c");
/// Where the helper sits in the helper image.
const HELPER: &str = "/bin/nx-helper";
/// The helper image's repository; the tag is the test process's pid.
const HELPER_REPO: &str = "nexbot-test-scrub-helper";

/// Builds (once per test process) an image `FROM` the tested subagent image with the helper,
/// compiled here with `gcc -static -pthread`, at [`HELPER`]; returns its tag. Helper images
/// of test processes that are gone are removed first.
async fn helper_image() -> String {
    static IMAGE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    IMAGE
        .get_or_init(|| async {
            tokio::task::spawn_blocking(build_helper_image).await.expect("helper image build")
        })
        .await
        .clone()
}

fn build_helper_image() -> String {
    use std::process::Command;
    let run = |cmd: &mut Command, what: &str| {
        let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
        assert!(
            out.status.success(),
            "{what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let listed = run(
        Command::new("docker").args(["images", HELPER_REPO, "--format", "{{.Tag}}"]),
        "docker images",
    );
    for tag in listed.lines() {
        let gone = tag.parse::<u32>().is_ok_and(|pid| !pool_common::test_process_alive(pid));
        if gone {
            let _ = Command::new("docker").args(["rmi", &format!("{HELPER_REPO}:{tag}")]).output();
        }
    }
    let dir = std::env::temp_dir().join(format!("nexbot-scrub-helper-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("helper.c"), HELPER_SOURCE).unwrap();
    run(
        Command::new("gcc")
            .args(["-static", "-pthread", "-O1", "-o"])
            .arg(dir.join("nx-helper"))
            .arg(dir.join("helper.c")),
        "gcc -static -pthread (install gcc and glibc's static archives: libc6-dev)",
    );
    let base = pool_common::image();
    std::fs::write(dir.join("Dockerfile"), format!("FROM {base}\nCOPY nx-helper {HELPER}\n"))
        .unwrap();
    let tag = format!("{HELPER_REPO}:{}", std::process::id());
    // The classic builder: it takes `FROM` from the local images (none can be pulled here).
    run(
        Command::new("/usr/bin/docker")
            .env("DOCKER_BUILDKIT", "0")
            .args(["build", "-q", "-t", &tag])
            .arg(&dir),
        "docker build of the helper image",
    );
    let _ = std::fs::remove_dir_all(&dir);
    tag
}

/// What the test's echo server received: one entry per connection, its whole payload.
#[derive(Debug, Clone, Default)]
struct Received(Arc<Mutex<Vec<String>>>);

impl Received {
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// A TCP server on the pool network's gateway (where containers reach the host) that keeps
/// what each connection sends: the implant's reports.
async fn echo_server(gateway: IpAddr) -> (SocketAddr, Received) {
    let listener = pool_common::listen_beside_the_pool(SocketAddr::new(gateway, 0));
    let addr = listener.local_addr().unwrap();
    let received = Received::default();
    let keep = received.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let keep = keep.clone();
            tokio::spawn(async move {
                let mut payload = String::new();
                let _ = conn.read_to_string(&mut payload).await;
                keep.0.lock().unwrap().push(payload);
            });
        }
    });
    (addr, received)
}

/// A pool of one container of `image`.
async fn one_container_pool(test: &str, image: Option<String>) -> Option<(Pool, PoolConfig)> {
    let (docker, mut config) = setup(test).await?;
    config.size = 1;
    if let Some(image) = image {
        if nexbot_tests::remote::remote_leg() {
            let local = nexbot_tests::docker_or_skip(test).await?;
            pool_common::on_the_remote_host(&local, &image).await;
        }
        config.image = image;
    }
    let pool = Pool::start(docker, config.clone()).await.expect("pool starts");
    Some((pool, config))
}

fn canary_secrets() -> SecretMap {
    let mut secrets = SecretMap::new();
    secrets.insert("CANARY", SecretString::from(CANARY.to_owned()));
    secrets
}

/// The pid in task 1's "implant PID state S threads N" line, after checking that the planted
/// process has the attack's shape: its leader a zombie, another thread alive.
fn implant_pid(out: &str) -> String {
    let line = out.lines().find(|l| l.starts_with("implant ")).unwrap_or_else(|| {
        panic!("task 1 planted nothing:\n{out}");
    });
    let fields: Vec<&str> = line.split_whitespace().collect();
    // gVisor lists no tasks under a thread group whose leader exited (measured: `Threads: 0`,
    // an empty /proc/<pid>/task) though its other thread runs on (it keeps reporting).
    let threads = if nexbot_tests::expected_runtime() == "runsc" { "0" } else { "2" };
    assert_eq!(
        fields.get(2..).map(|f| f.join(" ")),
        Some(format!("state Z threads {threads}")),
        "the implant is a thread group whose leader exited: {line}"
    );
    fields[1].to_owned()
}

/// Task 2 holds the canary in its command's environment; task 3 looks for the implant and
/// what it collected. Returns task 3's output. Every scrub must have been clean, and the
/// container reused throughout.
async fn canary_then_hunt(
    pool: &Pool,
    llm: &nexbot_tests::scripted_llm::ScriptedLlm,
    pid: &str,
) -> String {
    let (out, scrub) = run_command(
        pool,
        llm,
        "esc-2",
        "test -n \"$CANARY\" && echo have-it; sleep 1",
        Some(canary_secrets()),
    )
    .await;
    assert!(out.contains("have-it"), "{out}");
    assert!(scrub.clean, "{scrub:?}");
    let hunt = format!(
        "[ -e /proc/{pid} ] && echo \"implant-$(echo still)-alive $(cat /proc/{pid}/comm) $(ls /proc/{pid}/task | wc -l) threads\" \
         || echo implant-gone; \
         cat /tmp/.loot /workspace/scratch/.loot 2>&1; echo end"
    );
    let (out, scrub) = run_command(pool, llm, "esc-3", &hunt, None).await;
    assert!(scrub.clean, "{scrub:?}");
    out
}

#[tokio::test]
async fn a_thread_group_whose_leader_exited_dies_with_its_task() {
    let image = helper_image().await;
    let Some((pool, _)) = one_container_pool("escthread", Some(image)).await else { return };
    let container = pool.snapshot()[0].container_id.clone().unwrap();
    let gateway = pool.network().gateway;
    let llm = llm_on(gateway, vec![]).await;
    let (echo, received) = echo_server(gateway).await;

    // Task 1 plants the helper in its own session (out of the command's process group) and
    // lets it report once.
    let plant = format!(
        "setsid {HELPER} implant {} {} </dev/null >/dev/null 2>&1 & pid=$!; sleep 1; \
         echo \"implant $pid state $(cut -d' ' -f3 /proc/$pid/stat) threads $(ls /proc/$pid/task | wc -l)\"",
        echo.ip(),
        echo.port()
    );
    let (out, planted) = run_command(&pool, &llm, "esc-1", &plant, None).await;
    let pid = implant_pid(&out);
    assert!(planted.clean, "{planted:?}");
    // The scrub has killed it by now; a report it sent just before may still be on its way
    // through the echo server (accepted, not yet read, on a loaded machine). Let those land
    // first: what comes after is from an implant that survived (it reports every 50 ms, and
    // task 2 alone lasts over a second).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let reported = received.all();
    assert!(
        reported.iter().any(|r| r == "alive\n"),
        "positive control: the implant reached the echo server during task 1: {reported:?}"
    );

    let out = canary_then_hunt(&pool, &llm, &pid).await;
    let after: Vec<String> = received.all().split_off(reported.len());
    assert!(after.is_empty(), "the echo server heard from the implant after task 1: {after:?}");
    assert!(out.contains("implant-gone") && !out.contains("implant-still-alive"), "{out}");
    assert!(!out.contains("LOOT") && !out.contains(CANARY), "the collector's output: {out}");

    // (Checked last, so that a scrub that misses the implant fails on what leaked.)
    assert!(planted.killed >= 1, "the implant was there to be killed: {planted:?}");

    let snapshot = &pool.snapshot()[0];
    assert_eq!(snapshot.container_id.as_deref(), Some(container.as_str()), "{snapshot:?}");
    assert_eq!(snapshot.tasks_served, 3);
    pool.shutdown().await.unwrap();
}

/// x86-64 machine code the busybox-only attack writes over a child's code, at the instruction
/// its blocked system call returns to: a thread on a fresh stack that sleeps forever, and the
/// leader thread exits alone. Written with `printf '\xNN…' | dd of=/proc/<pid>/mem`.
const IMPLANT_CODE: &[u8] = &[
    0x31, 0xff, // xor edi, edi               ; mmap(addr = NULL,
    0xbe, 0x00, 0x00, 0x01, 0x00, // mov esi, 0x10000    ;   length = 64 KiB,
    0xba, 0x03, 0x00, 0x00, 0x00, // mov edx, 3          ;   PROT_READ | PROT_WRITE,
    0x41, 0xba, 0x22, 0x00, 0x00, 0x00, // mov r10d, 0x22 ; MAP_PRIVATE | MAP_ANONYMOUS,
    0x49, 0xc7, 0xc0, 0xff, 0xff, 0xff, 0xff, // mov r8, -1 ; fd = -1,
    0x45, 0x31, 0xc9, // xor r9d, r9d             ;   offset = 0)
    0xb8, 0x09, 0x00, 0x00, 0x00, // mov eax, 9 (SYS_mmap)
    0x0f, 0x05, // syscall
    0x48, 0x8d, 0xb0, 0x00, 0x00, 0x01, 0x00, // lea rsi, [rax + 0x10000] ; the stack's top
    0xbf, 0x00, 0x0f, 0x01, 0x00, // mov edi, 0x10f00 ; CLONE_VM|FS|FILES|SIGHAND|THREAD
    0x31, 0xd2, // xor edx, edx               ; parent_tid = NULL
    0x45, 0x31, 0xd2, // xor r10d, r10d       ; child_tid = NULL
    0x45, 0x31, 0xc0, // xor r8d, r8d         ; tls = 0
    0xb8, 0x38, 0x00, 0x00, 0x00, // mov eax, 56 (SYS_clone)
    0x0f, 0x05, // syscall
    0x85, 0xc0, // test eax, eax
    0x74, 0x09, // jz +9                      ; the new thread goes to `thread`
    0x31, 0xff, // xor edi, edi               ; the leader: exit(0) of this thread only
    0xb8, 0x3c, 0x00, 0x00, 0x00, // mov eax, 60 (SYS_exit)
    0x0f, 0x05, // syscall
    // thread:
    0x6a, 0x00, // push 0                     ; timespec.tv_nsec
    0x6a, 0x0a, // push 10                    ; timespec.tv_sec
    // again:
    0x48, 0x89, 0xe7, // mov rdi, rsp         ; nanosleep(&timespec,
    0x31, 0xf6, // xor esi, esi               ;   NULL)
    0xb8, 0x23, 0x00, 0x00, 0x00, // mov eax, 35 (SYS_nanosleep)
    0x0f, 0x05, // syscall
    0xeb, 0xf2, // jmp again (-14)
];

#[tokio::test]
async fn a_busybox_only_implant_through_proc_mem_dies_with_its_task() {
    let Some((pool, _)) = one_container_pool("escbusybox", None).await else { return };
    let container = pool.snapshot()[0].container_id.clone().unwrap();
    let llm = llm_on(pool.network().gateway, vec![]).await;

    // Task 1: a child in its own session blocks opening a fifo; the shell reads where its
    // system call returns to (`/proc/<pid>/syscall`: number, six arguments, sp, pc), writes the
    // code there through `/proc/<pid>/mem`, and wakes it by opening the fifo for writing.
    let code: String = IMPLANT_CODE.iter().map(|b| format!("\\x{b:02x}")).collect();
    let plant = format!(
        "cd /workspace/scratch && mkfifo f && \
         {{ setsid cat f </dev/null >/dev/null 2>&1 & pid=$!; }}; sleep 0.3; \
         set -- $(cat /proc/$pid/syscall); rip=$9; \
         printf '{code}' | dd of=/proc/$pid/mem bs=1 seek=$((rip)) conv=notrunc 2>&1; \
         echo > f; sleep 0.3; \
         echo \"implant $pid state $(cut -d' ' -f3 /proc/$pid/stat) threads $(ls /proc/$pid/task | wc -l)\""
    );
    let (out, planted) = run_command(&pool, &llm, "esc-1", &plant, None).await;
    if nexbot_tests::expected_runtime() == "runsc" {
        // gVisor opens no process's memory to a task, its own child's included (measured):
        // the implant cannot be written, so there is nothing to outlive the task.
        assert!(
            out.contains("dd: can't open '/proc/") && out.contains("Permission denied"),
            "{out}"
        );
        assert!(planted.clean, "{planted:?}");
        pool.shutdown().await.unwrap();
        return;
    }
    let pid = implant_pid(&out);
    assert!(planted.clean, "{planted:?}");

    let out = canary_then_hunt(&pool, &llm, &pid).await;
    assert!(out.contains("implant-gone") && !out.contains("implant-still-alive"), "{out}");

    // (Checked last, so that a scrub that misses the implant fails on what leaked.)
    assert!(planted.killed >= 1, "the implant was there to be killed: {planted:?}");

    let snapshot = &pool.snapshot()[0];
    assert_eq!(snapshot.container_id.as_deref(), Some(container.as_str()), "{snapshot:?}");
    assert_eq!(snapshot.tasks_served, 3);
    pool.shutdown().await.unwrap();
}

#[tokio::test]
async fn message_queues_and_system_v_ipc_do_not_reach_the_next_task() {
    let image = helper_image().await;
    let Some((pool, _)) = one_container_pool("escipc", Some(image)).await else { return };
    let container = pool.snapshot()[0].container_id.clone().unwrap();
    let llm = llm_on(pool.network().gateway, vec![]).await;

    let listing = "ls -a /dev/mqueue; cat /proc/sysvipc/shm /proc/sysvipc/sem /proc/sysvipc/msg";
    let (out, scrub) = run_command(
        &pool,
        &llm,
        "ipc-1",
        &format!("{HELPER} ipc; {HELPER} ipc-check; {listing}"),
        None,
    )
    .await;
    // Positive control: all four exist and are seen where the next task would look. Under
    // gVisor, which lists none of them where the scrub looks (no /dev/mqueue, no
    // /proc/sysvipc), the subagent refuses all four to every command instead.
    let gvisor = nexbot_tests::expected_runtime() == "runsc";
    assert!(out.contains("ipc made"), "{out}");
    for kind in ["mq", "shm", "sem", "msg"] {
        if gvisor {
            assert!(out.contains(&format!("no {kind}: Function not implemented")), "{out}");
            assert!(out.contains(&format!("none {kind}")), "{out}");
        } else {
            assert!(out.contains(&format!("FOUND {kind}")), "{kind} was made: {out}");
        }
    }
    if !gvisor {
        assert!(out.contains("nxs-leftover"), "{out}");
    }
    assert!(scrub.clean, "{scrub:?}");
    let made = scrub;

    let (out, scrub) =
        run_command(&pool, &llm, "ipc-2", &format!("{HELPER} ipc-check; {listing}"), None).await;
    assert!(scrub.clean, "{scrub:?}");
    for kind in ["mq", "shm", "sem", "msg"] {
        assert!(
            out.contains(&format!("none {kind}")),
            "the {kind} of task 1 is still there:\n{out}"
        );
    }
    assert!(!out.contains("nxs-leftover") && !out.contains("FOUND"), "{out}");
    // The keys 0x4e58..0x4e5a in the kernel's listings (decimal there).
    for key in ["20056", "20057", "20058"] {
        assert!(!out.contains(key), "System V key {key} is still listed:\n{out}");
    }
    // (Checked last, so that a scrub that misses them fails on what is left.)
    if !gvisor {
        assert!(made.removed >= 4, "the queue and three IPC objects were removed: {made:?}");
    }

    let snapshot = &pool.snapshot()[0];
    assert_eq!(snapshot.container_id.as_deref(), Some(container.as_str()), "{snapshot:?}");
    pool.shutdown().await.unwrap();
}

#[tokio::test]
async fn pid_1_is_the_subagent_and_its_memory_is_closed_to_commands() {
    let Some((pool, _)) = one_container_pool("escpid1", None).await else { return };
    let llm = llm_on(pool.network().gateway, vec![]).await;
    // The address tried: pid 1's first mapping if its maps could be read, else a usual one.
    // The write puts back the byte just read, so a pid 1 that is open is not harmed by it.
    let probe = "echo \"pid1 $(cat /proc/1/comm)\"; \
        a=$(cut -d- -f1 /proc/1/maps 2>/dev/null | head -n1); a=$((0x${a:-400000})); \
        dd if=/proc/1/mem bs=1 count=1 skip=$a of=/workspace/scratch/b 2>/workspace/scratch/err \
          && echo PID1-MEM-READABLE || echo \"pid1-mem-read-denied: $(tail -n1 /workspace/scratch/err)\"; \
        printf x > /workspace/scratch/b2; [ -s /workspace/scratch/b ] && cp /workspace/scratch/b /workspace/scratch/b2; \
        dd if=/workspace/scratch/b2 of=/proc/1/mem bs=1 seek=$a conv=notrunc 2>/workspace/scratch/err \
          && echo PID1-MEM-WRITABLE || echo \"pid1-mem-write-denied: $(tail -n1 /workspace/scratch/err)\"; \
        sleep 30 & own=$!; o=$(cut -d- -f1 /proc/$own/maps | head -n1); \
        dd if=/proc/$own/mem bs=1 count=1 skip=$((0x$o)) 2>/dev/null | wc -c | grep -q 1 && echo own-mem-readable; \
        kill $own";
    let (out, scrub) = run_command(&pool, &llm, "pid1", probe, None).await;
    assert!(scrub.clean, "{scrub:?}");
    assert!(out.contains("pid1 nexbot-subagent"), "pid 1 is the subagent, no init: {out}");
    assert!(out.contains("pid1-mem-read-denied"), "{out}");
    assert!(out.contains("pid1-mem-write-denied"), "{out}");
    assert!(!out.contains("PID1-MEM"), "{out}");
    // Positive control: the same reads work on the command's own child. Not under gVisor,
    // which refuses every process's `/proc/<pid>/mem` to a task (measured; docs/runtimes.md).
    if nexbot_tests::expected_runtime() != "runsc" {
        assert!(out.contains("own-mem-readable"), "{out}");
    }
    pool.shutdown().await.unwrap();
}

/// Without an init, `docker stop`'s SIGTERM goes to the subagent as pid 1, which ignores any
/// signal it has no handler for: it must still stop at once and cleanly (exit code 0 and its
/// "subagent stopped" line naming SIGTERM), not be SIGKILLed at the end of the grace (137).
#[tokio::test]
async fn docker_stop_still_ends_the_subagent_that_is_pid_1() {
    let Some(_) = setup("escstop").await else { return };
    let name = format!("nxp-escstop-{}", std::process::id());
    let _leftovers =
        pool_common::Leftovers { containers: vec![name.clone()], networks: Vec::new() };
    let docker = |args: &[&str]| {
        let out = std::process::Command::new("docker").args(args).output().expect("run docker");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "docker {args:?}: {text}");
        text
    };
    let image = pool_common::image();
    docker(&["run", "-d", "-i", "--name", &name, "--network", "none", &image]);
    let comm = docker(&["exec", &name, "cat", "/proc/1/comm"]);
    assert_eq!(comm.trim(), "nexbot-subagent", "no init in front of the subagent");
    docker(&["stop", "-t", "60", &name]);
    let code = docker(&["inspect", &name, "--format", "{{.State.ExitCode}}"]);
    assert_eq!(code.trim(), "0", "stopped by its own SIGTERM handling, not killed");
    let logs = docker(&["logs", &name]);
    assert!(
        logs.lines().any(|l| l.contains("subagent stopped") && l.contains("SIGTERM")),
        "{logs}"
    );
}

/// With no init, the orphans of a running task's commands are the subagent's children: it
/// must reap them as they exit (not only in the scrub), or a task that leaves short-lived
/// background processes fills the pids limit with zombies. The command waits until its
/// orphan's `/proc` entry is gone; without reaping that never happens and the command runs
/// into its timeout.
#[tokio::test]
async fn the_orphans_of_a_running_command_are_reaped_while_it_runs() {
    let Some((pool, _)) = one_container_pool("escorphan", None).await else { return };
    let llm = llm_on(pool.network().gateway, vec![]).await;
    let command = "sh -c 'sleep 0.2 & echo $! > /workspace/scratch/orphan'; \
        pid=$(cat /workspace/scratch/orphan); echo \"orphan $pid\"; \
        until [ ! -e /proc/$pid ]; do sleep 0.05; done; echo orphan-reaped";
    let (out, scrub) = run_command(&pool, &llm, "orphan-1", command, None).await;
    assert!(out.contains("orphan ") && out.contains("orphan-reaped"), "{out}");
    assert!(scrub.clean, "{scrub:?}");
    pool.shutdown().await.unwrap();
}
