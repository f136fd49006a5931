//! The container's hardening as the engine reports it (`docker inspect`), judged line by line
//! against what the pool asks for: not root, no capability, read-only root, limits set,
//! `no-new-privileges`, not privileged, the runtime configured.

use nexbot_docker::Hardening;

use crate::report::{Line, Outcome};

const NAME: &str = "container.hardening";
const ATTACK: &str = "the container's hardening (docker inspect)";

/// `runtime`: the runtime the pool was configured with, as the engine names it.
pub fn judge(found: Result<Hardening, String>, runtime: &str) -> Line {
    let h = match found {
        Ok(h) => h,
        Err(why) => return Line::new(NAME, ATTACK, Outcome::NotRun, why),
    };
    let mut weak = Vec::new();
    let user = h.user.split(':').next().unwrap_or_default();
    if user.is_empty() || user == "root" || user == "0" {
        weak.push(format!("runs as root (user {:?})", h.user));
    }
    if h.privileged {
        weak.push("privileged".to_owned());
    }
    if !h.cap_add.is_empty() {
        weak.push(format!("capabilities added: {}", h.cap_add.join(", ")));
    }
    if !h.cap_drop.iter().any(|c| c.eq_ignore_ascii_case("ALL")) {
        weak.push("not every capability dropped".to_owned());
    }
    if !h.read_only_root {
        weak.push("root filesystem writable".to_owned());
    }
    for (value, what) in [(h.memory_bytes, "memory"), (h.pids_limit, "pids"), (h.nano_cpus, "cpu")]
    {
        if value <= 0 {
            weak.push(format!("no {what} limit"));
        }
    }
    if !h.security_opt.iter().any(|o| o.starts_with("no-new-privileges")) {
        weak.push("no-new-privileges not set".to_owned());
    }
    let shown_runtime = if h.runtime.is_empty() { "the engine's default" } else { &h.runtime };
    if !runtime.is_empty() && !h.runtime.is_empty() && h.runtime != runtime {
        weak.push(format!("runtime {} instead of {runtime}", h.runtime));
    }
    if weak.is_empty() {
        let evidence = format!(
            "{}: user {}, cap_drop ALL, none added, read-only root, memory {} MiB, pids {}, \
             cpus {:.2}, no-new-privileges, runtime {shown_runtime}",
            h.container,
            h.user,
            h.memory_bytes / (1024 * 1024),
            h.pids_limit,
            h.nano_cpus as f64 / 1e9
        );
        Line::new(NAME, ATTACK, Outcome::Held, evidence)
    } else {
        Line::new(NAME, ATTACK, Outcome::Broken, format!("{}: {}", h.container, weak.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hardened() -> Hardening {
        Hardening {
            container: "abc".into(),
            user: "65532:65532".into(),
            cap_drop: vec!["ALL".into()],
            read_only_root: true,
            memory_bytes: 512 << 20,
            pids_limit: 128,
            nano_cpus: 1_000_000_000,
            security_opt: vec!["no-new-privileges:true".into()],
            runtime: "runc".into(),
            ..Hardening::default()
        }
    }

    #[test]
    fn a_hardened_container_holds_and_each_weakening_is_named() {
        let line = judge(Ok(hardened()), "runc");
        assert_eq!(line.outcome, Outcome::Held, "{}", line.evidence);
        assert!(line.evidence.contains("memory 512 MiB, pids 128, cpus 1.00"), "{}", line.evidence);
        type Weaken = fn(&mut Hardening);
        let weakenings: [(Weaken, &str); 6] = [
            (|h| h.cap_add = vec!["NET_ADMIN".into()], "capabilities added: NET_ADMIN"),
            (|h| h.user = "root".into(), "runs as root"),
            (|h| h.read_only_root = false, "root filesystem writable"),
            (|h| h.pids_limit = 0, "no pids limit"),
            (|h| h.security_opt.clear(), "no-new-privileges not set"),
            (|h| h.privileged = true, "privileged"),
        ];
        for (weaken, said) in weakenings {
            let mut h = hardened();
            weaken(&mut h);
            let line = judge(Ok(h), "runc");
            assert_eq!(line.outcome, Outcome::Broken, "{said}");
            assert!(line.evidence.contains(said), "{said}: {}", line.evidence);
        }
        let line = judge(Ok(hardened()), "runsc");
        assert!(line.evidence.contains("runtime runc instead of runsc"), "{}", line.evidence);
        assert_eq!(judge(Err("gone".into()), "runc").outcome, Outcome::NotRun);
    }
}
