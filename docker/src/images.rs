//! Images on a remote engine: the same image, by id, as on this machine.
//!
//! Why by id: a tag names whatever was last built or loaded under it, so a remote engine's
//! `nexbot-subagent:dev` may be last month's image. Nothing is pulled from a registry: an image
//! the remote engine lacks (or holds in another version) is copied from the local engine, as
//! `docker save | docker load` would, with its progress logged.

use bollard::query_parameters::ImportImageOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;

use crate::connect::inspect_image;
use crate::error::PoolError;

/// What [`sync_image`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageSync {
    /// The remote engine already had the image, with the same id.
    Same { id: String },
    /// The image was copied: its id and how many bytes went over.
    Copied { id: String, bytes: u64 },
}

/// Makes `image` on `remote` the image `local` has under that name (same id), copying it
/// when it is missing there or differs. `progress(sent, total)` hears about every chunk
/// (`total`: the image's size as the local engine reports it, uncompressed).
pub async fn sync_image(
    local: &Docker,
    remote: &Docker,
    image: &str,
    mut progress: impl FnMut(u64, u64) + Send + 'static,
) -> Result<ImageSync, PoolError> {
    let here = inspect_image(local, image).await?;
    let id = here.id.unwrap_or_default();
    if remote_id(remote, image).await?.as_deref() == Some(id.as_str()) {
        return Ok(ImageSync::Same { id });
    }
    let total = here.size.unwrap_or(0).max(0) as u64;
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = sent.clone();
    let export = local.export_image(image).inspect(move |chunk| {
        if let Ok(bytes) = chunk {
            let now = counter.fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::Relaxed);
            progress(now + bytes.len() as u64, total);
        }
    });
    let options = ImportImageOptionsBuilder::new().quiet(true).build();
    let mut answers = remote.import_image_stream(options, export, None);
    while let Some(answer) = answers.next().await {
        let info = answer.map_err(|e| PoolError::docker(format!("load {image}"), e))?;
        if let Some(error) = info.error_detail.and_then(|d| d.message) {
            return Err(load_failed(image, error));
        }
    }
    let bytes = sent.load(std::sync::atomic::Ordering::Relaxed);
    match remote_id(remote, image).await? {
        Some(now) if now == id => Ok(ImageSync::Copied { id, bytes }),
        other => Err(load_failed(
            image,
            format!("after loading, the remote engine has {other:?}, not {id}"),
        )),
    }
}

fn load_failed(image: &str, message: String) -> PoolError {
    PoolError::docker(
        format!("load {image} into the remote engine"),
        bollard::errors::Error::DockerResponseServerError { status_code: 500, message },
    )
}

/// The id of `image` on `docker`, `None` when it has none under that name.
async fn remote_id(docker: &Docker, image: &str) -> Result<Option<String>, PoolError> {
    match inspect_image(docker, image).await {
        Ok(found) => Ok(found.id),
        Err(PoolError::ImageMissing { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Loads a `docker save` archive (`file`) into `docker`, as `docker load -i` does; the names
/// (or ids) of the images it loaded.
pub async fn load_image_file(
    docker: &Docker,
    file: &std::path::Path,
) -> Result<Vec<String>, PoolError> {
    let what = format!("load {}", file.display());
    let opened = tokio::fs::File::open(file)
        .await
        .map_err(|e| PoolError::docker(what.clone(), bollard::errors::Error::IOError { err: e }))?;
    let body = tokio_util::io::ReaderStream::new(opened);
    let options = ImportImageOptionsBuilder::new().quiet(false).build();
    let mut answers = docker.import_image_stream(options, body, None);
    let mut loaded = Vec::new();
    while let Some(answer) = answers.next().await {
        let info = answer.map_err(|e| PoolError::docker(what.clone(), e))?;
        if let Some(error) = info.error_detail.and_then(|d| d.message) {
            return Err(load_failed(&file.display().to_string(), error));
        }
        let said = info.stream.unwrap_or_default();
        for prefix in ["Loaded image: ", "Loaded image ID: "] {
            if let Some(name) = said.trim().strip_prefix(prefix) {
                loaded.push(name.to_owned());
            }
        }
    }
    Ok(loaded)
}
