//! `docker/link-order.sh`, which `make image-bins` runs to link the images' binaries with the
//! daemon's start-up functions together (docs/performance.md, "Host idle RSS"): the real script on
//! a copy of this very test binary, whose symbols stand in for the daemon's. What it must get
//! right: a function named exactly is ordered; one whose hash changed (a new toolchain) is found by
//! its name when that name is one function's; a generic function's many copies are not guessed at;
//! and the binaries are removed for relinking when, and only when, the order changed.

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

fn run(keys: &Path, order: &Path, bin: &Path) -> String {
    let out = Command::new("sh").arg(script()).arg(keys).arg(order).arg(bin).output().expect("sh");
    let said =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "link-order.sh failed:\n{said}");
    said
}

#[test]
fn link_order_orders_named_and_renamed_functions_and_relinks_only_when_the_order_changed() {
    assert_eq!(link_order_probe_single(), 7);
    assert_eq!(link_order_probe_generic::<u8>(), 0);
    assert_eq!(link_order_probe_generic::<u16>(), 0);

    let tmp = TempDir::new("nxl-link-order");
    // The binary as cargo leaves it: `deps/NAME-HASH`, and NAME, a hard link to it.
    std::fs::create_dir(tmp.0.join("deps")).unwrap();
    let in_deps = tmp.0.join("deps/probe-0123");
    std::fs::copy(std::env::current_exe().unwrap(), &in_deps).unwrap();
    let bin = tmp.0.join("probe");
    std::fs::hard_link(&in_deps, &bin).unwrap();

    let single = symbols(&bin, "link_order_probe_single");
    assert_eq!(single.len(), 1, "{single:?}");
    let generic = symbols(&bin, "link_order_probe_generic");
    assert_eq!(generic.len(), 2, "one copy per type: {generic:?}");

    let keys = tmp.0.join("keys");
    let order = tmp.0.join("order");
    std::fs::write(
        &keys,
        format!("# a comment\nmain\n{}\n{}\nno_such_function\n", single[0], rehashed(&generic[0])),
    )
    .unwrap();
    let said = run(&keys, &order, &bin);
    assert_eq!(std::fs::read_to_string(&order).unwrap(), format!("main\n{}\n", single[0]));
    assert!(
        said.contains("of the 4 functions")
            && said.contains("2 are in these binaries as named")
            && said.contains("0 under a new hash")
            && said.contains("2 not at all"),
        "{said}"
    );
    assert!(!bin.exists() && !in_deps.exists(), "the order changed: both copies go");

    // Unchanged: nothing is relinked.
    std::fs::copy(std::env::current_exe().unwrap(), &bin).unwrap();
    run(&keys, &order, &bin);
    assert!(bin.exists(), "the order did not change, yet the binary was removed");

    // Another toolchain: the single function is found under its new hash; the generic one,
    // two functions of one name, is not.
    std::fs::write(&keys, format!("{}\n{}\n", rehashed(&single[0]), rehashed(&generic[1])))
        .unwrap();
    let said = run(&keys, &order, &bin);
    assert_eq!(std::fs::read_to_string(&order).unwrap(), format!("{}\n", single[0]));
    assert!(said.contains("1 under a new hash") && said.contains("1 not at all"), "{said}");
    assert!(!bin.exists(), "the order changed");
}
