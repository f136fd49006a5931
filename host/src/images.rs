//! The images a remote engine needs, copied there by id: at the daemon's start (progress in
//! the log) and by `nexbot images push` (progress on the terminal, before the first start or
//! after a rebuild; `--file` loads a `docker save` archive for an engine with no local one
//! beside the daemon). Which images, and the copy itself: `nexbot_docker::sync_image`.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nexbot_docker::{Docker, ImageSync};

use crate::config::Config;

/// What happened to one image, as it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Copying {
    /// A quarter more sent (25, 50, 75, 100).
    Percent { image: String, percent: u64 },
    /// The engine had it, with the same id.
    Same { image: String, id: String },
    /// Copied: its id and the bytes sent.
    Copied { image: String, id: String, bytes: u64 },
    /// Not copied, and why.
    Failed { image: String, error: String },
}

impl Copying {
    /// One line for a terminal.
    pub fn line(&self) -> String {
        match self {
            Self::Percent { image, percent } => format!("{image}: {percent} %"),
            Self::Same { image, id } => format!("{image}: already there ({id})"),
            Self::Copied { image, id, bytes } => {
                format!("{image}: copied, {:.1} MB ({id})", *bytes as f64 / 1e6)
            }
            Self::Failed { image, error } => format!("{image}: NOT copied: {error}"),
        }
    }
}

/// The images this daemon runs on its engine: the subagent's, each MCP server's that runs in
/// a container, and (on a remote engine) the egress node's.
pub fn needed(config: &Config) -> Vec<String> {
    let mut images = vec![config.subagent.image.clone()];
    let servers = config.mcp_servers().into_iter().filter(|s| !s.is_remote());
    images.extend(servers.map(|s| s.image().to_owned()));
    if config.sandbox.is_remote() {
        images.push(config.sandbox.node_image().to_owned());
    }
    images.sort();
    images.dedup();
    images
}

/// What hears about each image as it is copied.
pub type Report = Arc<dyn Fn(Copying) + Send + Sync>;

/// Copies each of `images` from this machine's engine to `remote` where it is missing or
/// differs (by id), telling `report` as it goes. Fails only when there is no local engine.
pub async fn copy_from_local(
    remote: &Docker,
    images: &[String],
    report: Report,
) -> Result<(), String> {
    let local = nexbot_docker::connect(&nexbot_docker::SandboxConfig::default())
        .await
        .map_err(|e| format!("no local engine to copy images from ({e})"))?;
    for image in images {
        let (name, told_to, mut told) = (image.clone(), report.clone(), 0);
        let progress = move |sent: u64, total: u64| {
            let percent = (sent * 100).checked_div(total).unwrap_or(0).min(100);
            if percent >= told + 25 {
                told = percent - percent % 25;
                told_to(Copying::Percent { image: name.clone(), percent: told });
            }
        };
        report(match nexbot_docker::sync_image(&local, remote, image, progress).await {
            Ok(ImageSync::Same { id }) => Copying::Same { image: image.clone(), id },
            Ok(ImageSync::Copied { id, bytes }) => {
                Copying::Copied { image: image.clone(), id, bytes }
            }
            Err(e) => Copying::Failed { image: image.clone(), error: e.to_string() },
        });
    }
    Ok(())
}

/// `nexbot images push`: the needed images from this machine's engine, or `file` (a `docker
/// save` archive) loaded as it is, into the engine `sandbox.engine` names. Prints each step;
/// fails when an image could not be copied.
pub async fn push(config: &Config, file: Option<&Path>) -> anyhow::Result<()> {
    let (engine, reach) = nexbot_docker::connect_reach(&config.sandbox).await?;
    println!("engine: {}", reach.line());
    if let Some(file) = file {
        let loaded = nexbot_docker::load_image_file(&engine, file).await?;
        for image in &loaded {
            println!("loaded {image}");
        }
        anyhow::ensure!(!loaded.is_empty(), "{}: the engine loaded no image", file.display());
        return Ok(());
    }
    if !reach.remote() {
        println!("sandbox.engine is this machine's: its images are already where they run");
        return Ok(());
    }
    let failed = Arc::new(AtomicBool::new(false));
    let seen = failed.clone();
    let report: Report = Arc::new(move |event: Copying| {
        seen.fetch_or(matches!(event, Copying::Failed { .. }), Ordering::Relaxed);
        println!("{}", event.line());
    });
    copy_from_local(&engine, &needed(config), report).await.map_err(anyhow::Error::msg)?;
    anyhow::ensure!(
        !failed.load(Ordering::Relaxed),
        "some images were not copied (above); `make image` builds them here"
    );
    Ok(())
}
