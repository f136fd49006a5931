//! Shared parts of the `make bench` benchmarks: percentiles, the headline figures each bench
//! hands to the final summary, and a guard that removes what a bench created in Docker.
//!
//! Why a figures file: `make bench` runs several bench binaries (one per crate that owns the
//! code measured), yet must end with ONE table of every promised figure next to its target.
//! Each bench appends its headline figures to the file named by [`FIGURES_ENV`]; the `summary`
//! bench prints them last. Nothing here asserts: a missed target is printed, never a failure.

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

/// Names the file the benches append their figures to (set by `make bench`).
pub const FIGURES_ENV: &str = "NEXBOT_BENCH_FIGURES";

/// Names the `nexbot` binary the daemon benches run instead of the one cargo built for them
/// (set by `make bench` to the images' static binary, so the figures are of what ships).
pub const DAEMON_ENV: &str = "NEXBOT_BENCH_DAEMON";

/// Names the `nexbot-subagent` binary the subagent's pipe bench runs instead of cargo's (set
/// by `make order-file` to run it under a profiler).
pub const SUBAGENT_ENV: &str = "NEXBOT_BENCH_SUBAGENT";

/// The `nexbot` binary a daemon bench runs: [`DAEMON_ENV`]'s when set, else `built` (the
/// bench's own `CARGO_BIN_EXE_nexbot`, the dynamically linked release build).
pub fn daemon_binary(built: &str) -> String {
    binary_from_env(DAEMON_ENV, built)
}

/// The binary `var` names when set, else `built`.
pub fn binary_from_env(var: &str, built: &str) -> String {
    match std::env::var(var) {
        Ok(path) if !path.is_empty() => {
            assert!(
                Path::new(&path).is_file(),
                "{var}={path}: no such file (run `make image-bins`, or unset it to bench the \
                 release build)"
            );
            path
        }
        _ => built.to_owned(),
    }
}

/// Percentiles of a set of timings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    pub n: usize,
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
    pub mean: Duration,
}

impl Stats {
    /// Nearest-rank percentiles of `samples` (which must not be empty).
    pub fn of(mut samples: Vec<Duration>) -> Stats {
        assert!(!samples.is_empty(), "no samples");
        samples.sort();
        let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
        let total: Duration = samples.iter().sum();
        Stats {
            n: samples.len(),
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: samples[samples.len() - 1],
            mean: total / samples.len() as u32,
        }
    }

    /// One aligned line of the bench's own output.
    pub fn line(&self, name: &str) -> String {
        format!(
            "{name:<52} n={:<5} p50={:>9.3}  p90={:>9.3}  p99={:>9.3}  max={:>9.3} ms",
            self.n,
            ms(self.p50),
            ms(self.p90),
            ms(self.p99),
            ms(self.max)
        )
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The 1-, 5- and 15-minute load averages: figures from a shared machine mean little without.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// What the project promises for a figure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    AtMost(f64),
    AtLeast(f64),
}

impl Target {
    fn met(self, value: f64) -> bool {
        match self {
            Target::AtMost(limit) => value <= limit,
            Target::AtLeast(floor) => value >= floor,
        }
    }

    fn render(self, unit: &str) -> String {
        match self {
            Target::AtMost(limit) => format!("≤ {}", with_unit(&limit.to_string(), unit)),
            Target::AtLeast(floor) => format!("≥ {}", with_unit(&floor.to_string(), unit)),
        }
    }
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS:`, `RssAnon:`, …), in KiB.
/// The `node_modules` of the npm tree a `make` target (`make_target`) staged under
/// `target/<dir>/` (one folder per pinned set of packages) that holds `package`.
pub fn npm_tree(dir: &str, package: &str, make_target: &str) -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target").join(dir);
    std::fs::read_dir(&root)
        .ok()
        .and_then(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path().join("node_modules"))
                .find(|p| p.join(package).is_dir())
        })
        .unwrap_or_else(|| {
            panic!(
                "no npm tree with {package} under {}: run `make {make_target}` first",
                root.display()
            )
        })
}

/// An MCP server started by `command` as a child of the bench on plain pipes (stderr
/// dropped, killed with the handle), and its session: the "direct" side of a comparison.
pub async fn mcp_on_pipes(
    mut command: tokio::process::Command,
    name: &str,
) -> (tokio::process::Child, std::sync::Arc<nexbot_mcp::Session>) {
    let program = format!("{:?}", command.as_std().get_program());
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    let pipes = (child.stdout.take().expect("stdout"), child.stdin.take().expect("stdin"));
    let limit = Duration::from_secs(60);
    let session = nexbot_mcp::Session::connect(name, pipes, limit).await.expect("a session");
    (child, session)
}

/// A container's memory as the engine counts it (`docker stats`: `45.3MiB`).
pub fn container_memory(name: &str) -> Option<String> {
    let out = std::process::Command::new("docker")
        .args(["stats", "--no-stream", "--format", "{{.MemUsage}}", name])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split('/').next().map(|used| used.trim().to_owned()).filter(|u| !u.is_empty())
}

pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// One row of the summary table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figure {
    pub name: String,
    pub measured: String,
    pub target: String,
    /// `None` for reference rows (an alternative or a floor), which promise nothing.
    pub met: Option<bool>,
}

impl Figure {
    /// A promised figure: `value` in `unit`, judged against `target`.
    pub fn promised(name: &str, value: f64, unit: &str, target: Target) -> Figure {
        Figure {
            name: name.to_owned(),
            measured: with_unit(&number(value), unit),
            target: target.render(unit),
            met: Some(target.met(value)),
        }
    }

    /// A reference row: measured for comparison, with no target of its own.
    pub fn reference(name: &str, measured: &str, note: &str) -> Figure {
        Figure {
            name: name.to_owned(),
            measured: measured.to_owned(),
            target: note.to_owned(),
            met: None,
        }
    }

    fn verdict(&self) -> &'static str {
        match self.met {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "—",
        }
    }

    /// The figures-file form: one tab-separated line.
    pub fn to_line(&self) -> String {
        let clean = |s: &str| s.replace(['\t', '\n', '\r'], " ");
        format!(
            "{}\t{}\t{}\t{}",
            clean(&self.name),
            clean(&self.measured),
            clean(&self.target),
            self.verdict()
        )
    }

    /// Parses [`Figure::to_line`]; `None` for anything else.
    pub fn from_line(line: &str) -> Option<Figure> {
        let mut fields = line.split('\t');
        let (name, measured, target, verdict) =
            (fields.next()?, fields.next()?, fields.next()?, fields.next()?);
        if fields.next().is_some() {
            return None;
        }
        let met = match verdict {
            "yes" => Some(true),
            "NO" => Some(false),
            "—" => None,
            _ => return None,
        };
        Some(Figure {
            name: name.to_owned(),
            measured: measured.to_owned(),
            target: target.to_owned(),
            met,
        })
    }
}

/// A number with as many decimals as its size deserves (0.254, 3.21, 42.1, 984.7, 1850).
pub fn number(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 1000.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else if magnitude >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

fn with_unit(number: &str, unit: &str) -> String {
    match unit {
        "" => number.to_owned(),
        "×" => format!("{number}×"),
        _ => format!("{number} {unit}"),
    }
}

/// Prints `figure` and appends it to the figures file when [`FIGURES_ENV`] names one.
pub fn record(figure: Figure) {
    println!(
        "  => {}: {} (target {}; met: {})",
        figure.name,
        figure.measured,
        figure.target,
        figure.verdict()
    );
    let Some(path) = std::env::var_os(FIGURES_ENV) else { return };
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| writeln!(file, "{}", figure.to_line()));
    if let Err(e) = written {
        eprintln!("bench: cannot append to {}: {e}", Path::new(&path).display());
    }
}

/// The figures in the file at `path`, in the order they were recorded; lines starting with
/// `#` are comments.
pub fn read_figures(path: &Path) -> std::io::Result<Vec<Figure>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text.lines().filter(|l| !l.starts_with('#')).filter_map(Figure::from_line).collect())
}

/// The figures as one Markdown table: figure | measured | target | met?
pub fn table(figures: &[Figure]) -> String {
    let header = ["figure", "measured", "target", "met?"];
    let rows: Vec<[&str; 4]> = figures
        .iter()
        .map(|f| [f.name.as_str(), f.measured.as_str(), f.target.as_str(), f.verdict()])
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 4]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell}{}", " ".repeat(width - cell.chars().count())))
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let mut out = line(header);
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    out.push_str(&format!("|-{}-|\n", rule.join("-|-")));
    for row in rows {
        out.push_str(&line(row));
    }
    out
}

/// Removes, when dropped, every container carrying one of its labels and every network it
/// names — also when a bench panics halfway, so a failed run leaves nothing behind on a
/// shared engine. Uses the `docker` CLI because `Drop` cannot await.
#[derive(Debug, Default)]
pub struct DockerCleanup {
    labels: Vec<String>,
    networks: Vec<String>,
}

impl DockerCleanup {
    /// Containers labelled `key=value` are removed.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.push(format!("{key}={value}"));
        self
    }

    /// The network `name` is removed (after the containers).
    pub fn network(mut self, name: &str) -> Self {
        self.networks.push(name.to_owned());
        self
    }
}

/// Ids of the containers (running or not) labelled `key=value`.
pub fn containers_labelled(key: &str, value: &str) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label={key}={value}")])
        .output();
    match out {
        Ok(out) => {
            String::from_utf8_lossy(&out.stdout).split_whitespace().map(String::from).collect()
        }
        Err(_) => Vec::new(),
    }
}

impl Drop for DockerCleanup {
    fn drop(&mut self) {
        let quiet = |args: &[&str]| {
            let _ = std::process::Command::new("docker")
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        };
        for label in &self.labels {
            let (key, value) = label.split_once('=').unwrap_or((label, ""));
            let ids = containers_labelled(key, value);
            if !ids.is_empty() {
                eprintln!("bench cleanup: removing {} container(s) labelled {label}", ids.len());
                let mut args = vec!["rm", "-f"];
                args.extend(ids.iter().map(String::as_str));
                quiet(&args);
            }
        }
        for network in &self.networks {
            quiet(&["network", "rm", network]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_judged_both_ways() {
        let at_most = Figure::promised("ping p50", 0.254, "ms", Target::AtMost(0.4));
        assert_eq!((at_most.measured.as_str(), at_most.target.as_str()), ("0.254 ms", "≤ 0.4 ms"));
        assert_eq!(at_most.met, Some(true));
        assert_eq!(Figure::promised("x", 0.41, "ms", Target::AtMost(0.4)).met, Some(false));
        let ratio = Figure::promised("ratio", 1850.4, "×", Target::AtLeast(1000.0));
        assert_eq!((ratio.measured.as_str(), ratio.target.as_str()), ("1850×", "≥ 1000×"));
        assert_eq!(ratio.met, Some(true));
        assert_eq!(Figure::promised("r", 999.0, "×", Target::AtLeast(1000.0)).met, Some(false));
        let start = Figure::promised("pool start", 984.66, "ms", Target::AtMost(1000.0));
        assert_eq!((start.measured.as_str(), start.met), ("984.7 ms", Some(true)));
    }

    #[test]
    fn figures_survive_the_file_and_stray_lines_are_skipped() {
        let figures = vec![
            Figure::promised("host idle RSS", 11.7, "MB", Target::AtMost(15.0)),
            Figure::promised("execute overhead p99", 2.5, "ms", Target::AtMost(2.0)),
            Figure::reference("fresh\tdocker run", "480 ms", "alternative"),
        ];
        let path = std::env::temp_dir().join(format!("nxb-figures-{}.tsv", std::process::id()));
        let mut text = String::from("# started 1700000000\nnot a figure\n");
        for figure in &figures {
            text.push_str(&figure.to_line());
            text.push('\n');
        }
        std::fs::write(&path, text).unwrap();
        let read = read_figures(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(read.len(), 3);
        assert_eq!(read[..2], figures[..2]);
        // Tabs inside a field would break the file: they become spaces.
        assert_eq!(read[2].name, "fresh docker run");
        assert_eq!(read[2].met, None);
    }

    #[test]
    fn the_table_aligns_columns_and_shows_each_verdict() {
        let table = table(&[
            Figure::promised("warm ping p50", 0.25, "ms", Target::AtMost(0.4)),
            Figure::promised("image size", 16.0, "MB", Target::AtMost(15.0)),
            Figure::reference("fresh docker run p50", "480 ms", "alternative"),
        ]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5, "{table}");
        assert!(lines[0].starts_with("| figure ") && lines[0].ends_with("| met? |"), "{table}");
        assert!(lines[2].contains("| 0.250 ms |") && lines[2].ends_with("| yes  |"), "{table}");
        assert!(lines[3].contains("| 16.0 MB ") && lines[3].ends_with("| NO   |"), "{table}");
        assert!(lines[4].ends_with("| —    |"), "{table}");
        let widths: Vec<usize> = lines.iter().map(|l| l.chars().count()).collect();
        assert!(widths.iter().all(|w| *w == widths[0]), "{table}");
    }

    #[test]
    fn stats_use_nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        let stats = Stats::of(samples);
        assert_eq!(stats.n, 100);
        assert_eq!(stats.p50, Duration::from_millis(51)); // rank round(99 * 0.5) = 50 → 51 ms
        assert_eq!(stats.p99, Duration::from_millis(99));
        assert_eq!(stats.max, Duration::from_millis(100));
        assert_eq!(stats.mean, Duration::from_micros(50_500));
    }
}
