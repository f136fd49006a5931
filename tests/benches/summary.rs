//! The last step of `make bench`: every headline figure the other benches recorded in the
//! figures file (see `nexbot_tests::bench`), as ONE table — figure | measured | target | met? —
//! with the date, the machine and its load, so a reader sees every promise beside its
//! measurement from the same run. Prints only; a missed target is a `NO`, never a failure.

use std::path::PathBuf;

use nexbot_tests::bench::{load_average, read_figures, table, FIGURES_ENV};

fn main() {
    let Some(path) = std::env::var_os(FIGURES_ENV).map(PathBuf::from) else {
        println!("no figures: {FIGURES_ENV} is not set (`make bench` sets it)");
        return;
    };
    let figures = match read_figures(&path) {
        Ok(figures) if !figures.is_empty() => figures,
        Ok(_) => {
            println!("no figures recorded in {}", path.display());
            return;
        }
        Err(e) => {
            println!("cannot read the figures file {}: {e}", path.display());
            return;
        }
    };
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let elapsed = started_at(&path).map(|start| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        now.map(|now| now.as_secs().saturating_sub(start)).unwrap_or(0)
    });
    let missed = figures.iter().filter(|f| f.met == Some(false)).count();
    let judged = figures.iter().filter(|f| f.met.is_some()).count();
    let load_at_start = header(&path, "# load average at the start: ").unwrap_or_default();
    println!(
        "\n=== make bench summary: {date}, {cores} cores, load average at the start \
         {load_at_start}, at the end {} ===",
        load_average()
    );
    print!("{}", table(&figures));
    println!(
        "{} of {judged} targets met; rows starting with two spaces are references (the \
         alternative, a floor, a breakdown) and promise nothing.",
        judged - missed
    );
    if let Some(secs) = elapsed {
        println!("The measured run took {} min {} s (compilation excluded).", secs / 60, secs % 60);
    }
}

/// The start time `make bench` writes at the top of the figures file (unix seconds).
fn started_at(path: &std::path::Path) -> Option<u64> {
    header(path, "# make bench started at ")?.parse().ok()
}

/// The value of the comment line of the figures file that starts with `prefix`.
fn header(path: &std::path::Path, prefix: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| l.strip_prefix(prefix)).map(|v| v.trim().to_owned())
}
