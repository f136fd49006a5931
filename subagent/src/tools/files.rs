//! `read_file`, `write_file`, `list_dir`: file access confined to the scratch directory.
//!
//! The scratch dir is the task's working area (a tmpfs in the container). Paths are taken
//! relative to it; `..`, absolute paths elsewhere and symlinks that lead outside are refused,
//! so the file tools cannot be talked into reading `/proc/self/environ` or the like.

use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use nexbot_protocol::{Redactor, TaskFile};

use super::{ToolError, ToolOutput};

/// `write_file` refuses content larger than this.
const MAX_WRITE: usize = 5 * 1024 * 1024;
/// `read_file` reads at most this much.
const MAX_READ: u64 = 1024 * 1024;
/// `list_dir` lists at most this many entries.
const MAX_ENTRIES: usize = 500;

/// Resolves `requested` inside `root`, refusing anything that would leave it.
pub fn confine(root: &Path, requested: &str) -> Result<PathBuf, ToolError> {
    let refuse = |why: &str| ToolError::Refused(format!("path {requested:?} {why}"));
    let root = root
        .canonicalize()
        .map_err(|e| ToolError::Failed(format!("scratch dir {} unusable: {e}", root.display())))?;
    let requested_path = Path::new(requested.trim());
    let relative = if requested_path.is_absolute() {
        requested_path
            .strip_prefix(&root)
            .map_err(|_| refuse(&format!("is outside the scratch dir {}", root.display())))?
            .to_path_buf()
    } else {
        requested_path.to_path_buf()
    };
    let mut path = root.clone();
    for component in relative.components() {
        match component {
            Component::Normal(part) => path.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err(refuse("contains '..'")),
            Component::RootDir | Component::Prefix(_) => return Err(refuse("is not relative")),
        }
    }
    // Symlinks: the deepest part of the path that exists must resolve inside the root.
    let mut existing = path.as_path();
    loop {
        match existing.canonicalize() {
            Ok(real) if real.starts_with(&root) => break,
            Ok(_) => return Err(refuse("leads outside the scratch dir through a symlink")),
            Err(_) => match existing.parent() {
                Some(parent) if existing.symlink_metadata().is_err() => existing = parent,
                // A dangling symlink: it could be created later pointing anywhere.
                _ => return Err(refuse("is a dangling symlink")),
            },
        }
    }
    Ok(path)
}

#[derive(Debug, Deserialize)]
pub struct ReadArgs {
    pub path: String,
}

pub async fn read_file(root: &Path, args: ReadArgs) -> Result<ToolOutput, ToolError> {
    let path = confine(root, &args.path)?;
    let meta = tokio::fs::metadata(&path).await.map_err(|e| io_error(&args.path, e))?;
    if meta.is_dir() {
        return Err(ToolError::Invalid(format!("{} is a directory; use list_dir", args.path)));
    }
    let mut file = tokio::fs::File::open(&path).await.map_err(|e| io_error(&args.path, e))?;
    let mut bytes = Vec::new();
    use tokio::io::AsyncReadExt;
    (&mut file)
        .take(MAX_READ)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| io_error(&args.path, e))?;
    if bytes.contains(&0) {
        return Ok(ToolOutput::external(
            format!("read_file {}", args.path),
            format!("{} is binary ({} bytes); not shown", args.path, meta.len()),
        ));
    }
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if meta.len() > MAX_READ {
        text.push_str(&format!(
            "\n[file is {} bytes; only the first {MAX_READ} were read]",
            meta.len()
        ));
    }
    Ok(ToolOutput::external(format!("read_file {}", args.path), text))
}

#[derive(Debug, Deserialize)]
pub struct WriteArgs {
    pub path: String,
    pub content: String,
    #[serde(default)]
    pub append: bool,
}

pub async fn write_file(root: &Path, args: WriteArgs) -> Result<ToolOutput, ToolError> {
    if args.content.len() > MAX_WRITE {
        return Err(ToolError::Invalid(format!(
            "content is {} bytes; write_file takes at most {MAX_WRITE}",
            args.content.len()
        )));
    }
    let path = confine(root, &args.path)?;
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent).await.map_err(|e| io_error(&args.path, e))?;
        // Re-check: a directory created above may not be swapped for a link to outside.
        confine(root, &args.path)?;
    }
    let mut file = tokio::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(args.append)
        .truncate(!args.append)
        .open(&path)
        .await
        .map_err(|e| io_error(&args.path, e))?;
    file.write_all(args.content.as_bytes()).await.map_err(|e| io_error(&args.path, e))?;
    file.flush().await.map_err(|e| io_error(&args.path, e))?;
    let verb = if args.append { "appended" } else { "wrote" };
    Ok(ToolOutput::plain(format!("{verb} {} bytes to {}", args.content.len(), args.path)))
}

#[derive(Debug, Deserialize)]
pub struct ListArgs {
    #[serde(default)]
    pub path: Option<String>,
}

pub async fn list_dir(root: &Path, args: ListArgs) -> Result<ToolOutput, ToolError> {
    let shown = args.path.clone().unwrap_or_else(|| ".".to_owned());
    let path = confine(root, &shown)?;
    let mut dir = tokio::fs::read_dir(&path).await.map_err(|e| io_error(&shown, e))?;
    let mut entries = Vec::new();
    let mut more = 0usize;
    while let Some(entry) = dir.next_entry().await.map_err(|e| io_error(&shown, e))? {
        if entries.len() >= MAX_ENTRIES {
            more += 1;
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let line = match entry.metadata().await {
            Ok(meta) if meta.is_dir() => format!("{name}/"),
            Ok(meta) if meta.file_type().is_symlink() => format!("{name}@"),
            Ok(meta) => format!("{name}\t{} bytes", meta.len()),
            Err(_) => format!("{name}\t(unreadable)"),
        };
        entries.push(line);
    }
    entries.sort();
    if entries.is_empty() {
        return Ok(ToolOutput::plain(format!("{shown} is empty")));
    }
    if more > 0 {
        entries.push(format!("… and {more} more entries"));
    }
    Ok(ToolOutput::plain(entries.join("\n")))
}

/// `return_file`: the file at `requested` (confined like the other file tools), read whole,
/// to go back with the task's answer (`docs/protocol-files.md#files`) under its plain name.
/// Refused: not a regular file, over the caps ([`nexbot_protocol::files`]: a file's size, how
/// many, how much in all, counting `taken`), a name already taken, and a file or name that holds
/// one of the task's secrets (in any form the redactor knows): a file leaves the sandbox only as
/// what the answer's text may be, free of them.
pub fn take_for_return(
    root: &Path,
    requested: &str,
    taken: &[TaskFile],
    redactor: &Redactor,
) -> Result<TaskFile, ToolError> {
    use nexbot_protocol::files::{MAX_FILE_BYTES, MAX_FILE_NAME_BYTES};
    let path = confine(root, requested)?;
    let meta = std::fs::metadata(&path).map_err(|e| io_error(requested, e))?;
    if !meta.is_file() {
        return Err(ToolError::Invalid(format!("{requested} is not a regular file")));
    }
    let given = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let name =
        nexbot_core::text::clean_file_name(&given, MAX_FILE_NAME_BYTES).ok_or_else(|| {
            ToolError::Invalid(format!("{requested}: rename it to a plain file name first"))
        })?;
    let before: u64 = taken.iter().map(|f| f.bytes.len() as u64).sum();
    nexbot_protocol::check_next_file(&name, meta.len(), taken.len(), before)
        .map_err(ToolError::Refused)?;
    if taken.iter().any(|f| f.name == name) {
        return Err(ToolError::Invalid(format!(
            "a file named {name} is already returned; rename this one first"
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    std::io::Read::read_to_end(
        &mut std::io::Read::take(
            std::fs::File::open(&path).map_err(|e| io_error(requested, e))?,
            MAX_FILE_BYTES + 1,
        ),
        &mut bytes,
    )
    .map_err(|e| io_error(requested, e))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ToolError::Refused(format!("{requested} grew past the limit while read")));
    }
    if redactor.redact_bytes(&bytes) != bytes || redactor.redact(&name) != name {
        return Err(ToolError::Refused(format!(
            "{requested} holds one of this task's secrets; it is not returned"
        )));
    }
    Ok(TaskFile { name, bytes })
}

/// Writes a file the host put for the task (`put_file`) into the scratch folder `root` under
/// its plain name, as a new file (an existing one is never overwritten nor followed).
pub fn place(root: &Path, file: &TaskFile) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(root.join(&file.name))?;
    out.write_all(&file.bytes)
}

fn io_error(path: &str, err: std::io::Error) -> ToolError {
    match err.kind() {
        ErrorKind::NotFound => ToolError::Failed(format!("{path}: no such file or directory")),
        ErrorKind::PermissionDenied => ToolError::Failed(format!("{path}: permission denied")),
        _ => ToolError::Failed(format!("{path}: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nxs-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn escapes_are_refused() {
        let root = scratch("escape");
        std::os::unix::fs::symlink("/etc", root.join("etc-link")).unwrap();
        std::os::unix::fs::symlink("/nonexistent-target", root.join("dangling")).unwrap();
        for bad in ["../x", "a/../../x", "/etc/passwd", "etc-link/passwd", "etc-link", "dangling"] {
            let err = confine(&root, bad).unwrap_err();
            assert!(matches!(err, ToolError::Refused(_)), "{bad}: {err}");
        }
        let inside = root.canonicalize().unwrap().join("notes/a.txt");
        assert_eq!(confine(&root, "notes/a.txt").unwrap(), inside);
        assert_eq!(confine(&root, inside.to_str().unwrap()).unwrap(), inside);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[tokio::test]
    async fn write_read_list_round_trip() {
        let root = scratch("rw");
        let args = WriteArgs { path: "d/n.txt".into(), content: "hello".into(), append: false };
        write_file(&root, args).await.unwrap();
        let args = WriteArgs { path: "d/n.txt".into(), content: " world".into(), append: true };
        write_file(&root, args).await.unwrap();
        let read = read_file(&root, ReadArgs { path: "d/n.txt".into() }).await.unwrap();
        assert_eq!(read.text, "hello world");
        let listed = list_dir(&root, ListArgs { path: Some("d".into()) }).await.unwrap();
        assert_eq!(listed.text, "n.txt\t11 bytes");
        let missing = read_file(&root, ReadArgs { path: "nope".into() }).await.unwrap_err();
        assert_eq!(missing.to_string(), "nope: no such file or directory");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
