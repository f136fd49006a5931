//! `docker/link-order.sh`, rustc's linker for the images' binaries (`make image-bins`), which
//! links them with the daemon's start-up functions together (docs/performance.md, "Host idle
//! RSS"): the real script, given a copy of this very test binary as the link's input (its
//! symbols stand in for the daemon's) and a recording stand-in for `cc`. What it must get right:
//! a function named exactly is ordered; one whose hash changed (a new toolchain) is found by its
//! name when that name is one function's; a generic function's many copies are not guessed at;
//! inputs named in rustc's `@file` count; a v0 name whose crate ids changed is found without
//! them; and `cc` gets every argument and the order file.

use nexbot_tests::TempDir;
use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repository root")
        .join("docker/link-order.sh")
}

#[inline(never)]
fn link_order_probe_single() -> u64 {
    std::hint::black_box(7)
}

#[inline(never)]
fn link_order_probe_generic<T: Default>() -> T {
    std::hint::black_box(T::default())
}

/// The symbols of `bin` whose name contains `part`.
fn symbols(bin: &Path, part: &str) -> Vec<String> {
    let out = Command::new("nm").arg("--defined-only").arg(bin).output().expect("run nm");
    assert!(out.status.success(), "nm {}", bin.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|name| name.contains(part))
        .map(str::to_owned)
        .collect()
}

/// `name` with its legacy hash (`17h…E`) replaced: the same function from another toolchain.
fn rehashed(name: &str) -> String {
    let at = name.rfind("17h").unwrap_or_else(|| panic!("{name}: no legacy symbol hash"));
    assert!(name.ends_with('E') && name.len() - at == 20, "{name}: no legacy symbol hash");
    format!("{}17h0123456789abcdefE", &name[..at])
}

/// Runs the script as rustc would run its linker, with `args`; `cc` records what it was given
/// in `dir/cc-args`. Returns what the script said, and `cc`'s arguments.
fn link(keys: &Path, dir: &Path, args: &[String]) -> (String, Vec<String>) {
    let cc = dir.join("cc");
    std::fs::write(&cc, format!("#!/bin/sh\nprintf '%s\\n' \"$@\" > {}/cc-args\n", dir.display()))
        .unwrap();
    std::fs::set_permissions(&cc, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = Command::new("sh")
        .arg(script())
        .args(args)
        .env("NEXBOT_ORDER_KEYS", keys)
        .env("NEXBOT_ORDER_CC", format!("{}", cc.display()))
        .output()
        .expect("sh");
    let said =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let cc_args = std::fs::read_to_string(dir.join("cc-args")).unwrap_or_default();
    assert!(out.status.success(), "link-order.sh failed:\n{said}");
    (said, cc_args.lines().map(str::to_owned).collect())
}

#[test]
fn link_order_orders_named_and_renamed_functions_from_what_the_link_reads() {
    assert_eq!(link_order_probe_single(), 7);
    assert_eq!(link_order_probe_generic::<u8>(), 0);
    assert_eq!(link_order_probe_generic::<u16>(), 0);

    let tmp = TempDir::new("nxl-link-order");
    // This binary, named as an object the link reads.
    let input = tmp.0.join("probe.o");
    std::fs::copy(std::env::current_exe().unwrap(), &input).unwrap();
    let single = symbols(&input, "link_order_probe_single");
    assert_eq!(single.len(), 1, "{single:?}");
    let generic = symbols(&input, "link_order_probe_generic");
    assert_eq!(generic.len(), 2, "one copy per type: {generic:?}");

    let keys = tmp.0.join("keys");
    let out = tmp.0.join("probe");
    let order = tmp.0.join("probe.order");
    std::fs::write(
        &keys,
        format!("# a comment\nmain\n{}\n{}\nno_such_function\n", single[0], rehashed(&generic[0])),
    )
    .unwrap();
    let args: Vec<String> = vec![
        "-m64".into(),
        input.display().to_string(),
        "-o".into(),
        out.display().to_string(),
        "-Wl,--gc-sections".into(),
    ];
    let (said, cc) = link(&keys, &tmp.0, &args);
    assert_eq!(std::fs::read_to_string(&order).unwrap(), format!("main\n{}\n", single[0]));
    assert!(
        said.contains("of the 4 functions")
            && said.contains("2 are in this link as named")
            && said.contains("0 under a new hash")
            && said.contains("2 not at all"),
        "{said}"
    );
    let counts = std::fs::read_to_string(tmp.0.join("probe.order.counts")).unwrap();
    assert!(said.contains(counts.trim()), "the counts kept for make are what it said: {counts}");
    let mut expected = args.clone();
    expected.push(format!("-Wl,--symbol-ordering-file={}", order.display()));
    expected.push("-Wl,--no-warn-symbol-ordering".into());
    assert_eq!(cc, expected, "cc gets every argument, then the order");

    // Another toolchain: the single function is found under its new hash; the generic one,
    // two functions of one name, is not. The input named in an `@file`, as rustc does when
    // the command line is too long.
    std::fs::write(&keys, format!("{}\n{}\n", rehashed(&single[0]), rehashed(&generic[1])))
        .unwrap();
    let at_file = tmp.0.join("linker-args");
    std::fs::write(&at_file, format!("{}\n-o\n{}\n", input.display(), out.display())).unwrap();
    let (said, cc) = link(
        &keys,
        &tmp.0,
        &[format!("@{}", at_file.display()), "-o".into(), out.display().to_string()],
    );
    assert_eq!(std::fs::read_to_string(&order).unwrap(), format!("{}\n", single[0]));
    assert!(said.contains("1 under a new hash") && said.contains("1 not at all"), "{said}");
    assert_eq!(cc[0], format!("@{}", at_file.display()));

    // Without keys it says what is missing and links nothing.
    let refused = Command::new("sh")
        .arg(script())
        .args(&args)
        .env_remove("NEXBOT_ORDER_KEYS")
        .output()
        .expect("sh");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("NEXBOT_ORDER_KEYS"));
}

/// The images' binaries use v0 mangling: a key whose crate ids (`Cs…_`) changed — a new crate in
/// the workspace, a dependency's version or features — is found without them when one function
/// alone has that name; a name that two versions of one crate define is not guessed at.
#[test]
fn link_order_finds_a_v0_name_whose_crate_ids_changed() {
    let tmp = TempDir::new("nxl-link-order-v0");
    // An object whose functions carry v0 names (assembler names given to C functions).
    let source = tmp.0.join("v0.c");
    std::fs::write(
        &source,
        "void a(void) __asm__(\"_RNvCs1new_5crate4func\");\nvoid a(void) {}\n\
         void b(void) __asm__(\"_RNvCs2aaa_4dupe5twice\");\nvoid b(void) {}\n\
         void c(void) __asm__(\"_RNvCs3bbb_4dupe5twice\");\nvoid c(void) {}\n",
    )
    .unwrap();
    let input = tmp.0.join("v0.o");
    let built = Command::new("cc").arg("-c").arg(&source).arg("-o").arg(&input).status();
    assert!(built.expect("run cc").success(), "cc -c {}", source.display());
    let keys = tmp.0.join("keys");
    std::fs::write(&keys, "_RNvCs9old_5crate4func\n_RNvCs9old_4dupe5twice\n").unwrap();
    let out = tmp.0.join("v0");
    let args = vec![input.display().to_string(), "-o".into(), out.display().to_string()];
    let (said, _) = link(&keys, &tmp.0, &args);
    let order = std::fs::read_to_string(tmp.0.join("v0.order")).unwrap();
    assert_eq!(order, "_RNvCs1new_5crate4func\n", "{said}");
    assert!(said.contains("1 under a new hash") && said.contains("1 not at all"), "{said}");
}
