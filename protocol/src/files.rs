//! Files carried between the host and a task's scratch folder (`docs/protocol-files.md#files`):
//! into it before the task starts (`put_file` requests), and back with its answer (`file`
//! lines, named in the `success`'s `files`). Additive to 1.0.
//!
//! Why on the link, in chunks: a file a user sent one chat must reach only that chat's task,
//! so it never goes through a host folder mounted into containers (which would be shared by
//! whatever else is mounted there); the attached stdio is already the task's private channel.
//! A line is at most 1 MiB ([`crate::MAX_REQUEST_LINE`]), so a file travels as base64 chunks
//! of [`FILE_CHUNK_BYTES`], in order. Both sides reassemble with [`Assembly`], which holds
//! every cap: a plain file name, at most [`MAX_FILE_BYTES`] a file, [`MAX_FILES`] files and
//! [`MAX_FILES_BYTES`] in all per direction and task.

use std::fmt;

use base64::Engine as _;

/// Bytes of a file per line (before base64, which makes them 4/3 as long): a `put_file` line
/// stays well under the 1 MiB request line limit.
pub const FILE_CHUNK_BYTES: usize = 512 * 1024;
/// The largest file a task takes in or gives back (Telegram's Bot API hands bots at most
/// 20 MB).
pub const MAX_FILE_BYTES: u64 = 20 * 1024 * 1024;
/// Most files a task takes in, and most it gives back.
pub const MAX_FILES: usize = 8;
/// Most bytes of all files a task takes in, and most it gives back.
pub const MAX_FILES_BYTES: u64 = 50 * 1024 * 1024;
/// The longest file name, in bytes.
pub const MAX_FILE_NAME_BYTES: usize = 100;

/// A whole file on its way into or out of a task: its plain name and its bytes. `Debug` shows
/// the size, not the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct TaskFile {
    pub name: String,
    pub bytes: Vec<u8>,
}

impl fmt::Debug for TaskFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskFile")
            .field("name", &self.name)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl TaskFile {
    /// The file's chunks as they go on the wire: `(offset, base64 data)`, in order. An empty
    /// file is one empty chunk, so it still arrives.
    pub fn chunks(&self) -> impl Iterator<Item = (u64, String)> + Send + '_ {
        let count = self.bytes.len().div_ceil(FILE_CHUNK_BYTES).max(1);
        (0..count).map(|i| {
            let start = i * FILE_CHUNK_BYTES;
            let end = (start + FILE_CHUNK_BYTES).min(self.bytes.len());
            let data = base64::engine::general_purpose::STANDARD.encode(&self.bytes[start..end]);
            (start as u64, data)
        })
    }
}

/// Why a file name is refused, or `Ok`: a plain name as core's rule for names from outside
/// leaves it ([`nexbot_core::text::clean_file_name`]: no path, no `..`, no control, invisible
/// or direction-changing characters, no leading dot), at most [`MAX_FILE_NAME_BYTES`].
pub fn check_file_name(name: &str) -> Result<(), String> {
    if nexbot_core::text::is_clean_file_name(name, MAX_FILE_NAME_BYTES) {
        return Ok(());
    }
    let hint = match nexbot_core::text::clean_file_name(name, MAX_FILE_NAME_BYTES) {
        Some(clean) => format!("; as {clean:?} it would be"),
        None => String::new(),
    };
    Err(format!(
        "file name {:?} is not a plain file name of at most {MAX_FILE_NAME_BYTES} bytes \
         (no path, no leading dot, no control or invisible characters){hint}",
        nexbot_core::text::clip(name, 120)
    ))
}

/// One file being put together from its chunks, and the running totals of its direction.
#[derive(Debug)]
pub struct Assembly {
    name: String,
    size: u64,
    bytes: Vec<u8>,
}

/// Whether a file named `name` of `size` bytes may go with a task after `before` other files
/// of `before_bytes` in all, in the same direction: a plain name, and every cap. The one
/// check of the caps, for whoever gathers a task's files (the host's delegation, the pool,
/// `return_file`) and for [`Assembly::start`].
pub fn check_next_file(
    name: &str,
    size: u64,
    before: usize,
    before_bytes: u64,
) -> Result<(), String> {
    check_file_name(name)?;
    if size > MAX_FILE_BYTES {
        return Err(format!(
            "file {name:?} is {} bytes; a task's file may be at most {MAX_FILE_BYTES}",
            size
        ));
    }
    if before >= MAX_FILES {
        return Err(format!("file {name:?}: a task takes at most {MAX_FILES} files"));
    }
    if before_bytes.saturating_add(size) > MAX_FILES_BYTES {
        return Err(format!(
            "file {name:?}: a task's files may be at most {MAX_FILES_BYTES} bytes in all"
        ));
    }
    Ok(())
}

impl Assembly {
    /// A file named `name` of `size` bytes starts arriving, after `before` other files of
    /// `before_bytes` in all in the same direction of the same task ([`check_next_file`]).
    pub fn start(name: &str, size: u64, before: usize, before_bytes: u64) -> Result<Self, String> {
        check_next_file(name, size, before, before_bytes)?;
        Ok(Self { name: name.to_owned(), size, bytes: Vec::with_capacity(size as usize) })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Adds the chunk at `offset` (base64 `data`): it must start where the last one ended
    /// and not pass the file's size.
    pub fn push(&mut self, offset: u64, data: &str) -> Result<(), String> {
        let have = self.bytes.len() as u64;
        if offset != have {
            return Err(format!(
                "file {:?}: a chunk at offset {offset}, but {have} bytes have arrived",
                self.name
            ));
        }
        let chunk = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| format!("file {:?}: a chunk is not base64 ({e})", self.name))?;
        if have + chunk.len() as u64 > self.size {
            return Err(format!(
                "file {:?}: chunks pass its size of {} bytes",
                self.name, self.size
            ));
        }
        self.bytes.extend_from_slice(&chunk);
        Ok(())
    }

    /// Whether every byte has arrived.
    pub fn is_complete(&self) -> bool {
        self.bytes.len() as u64 == self.size
    }

    /// The whole file, or why it is not whole.
    pub fn finish(self) -> Result<TaskFile, String> {
        if !self.is_complete() {
            return Err(format!(
                "file {:?}: {} of {} bytes arrived",
                self.name,
                self.bytes.len(),
                self.size
            ));
        }
        Ok(TaskFile { name: self.name, bytes: self.bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through(file: &TaskFile) -> Result<TaskFile, String> {
        let mut assembly = Assembly::start(&file.name, file.bytes.len() as u64, 0, 0)?;
        for (offset, data) in file.chunks() {
            assembly.push(offset, &data)?;
        }
        assembly.finish()
    }

    #[test]
    fn a_file_goes_through_its_chunks_whole_empty_or_large() {
        for size in [0, 1, FILE_CHUNK_BYTES, FILE_CHUNK_BYTES + 7, 3 * FILE_CHUNK_BYTES] {
            let file = TaskFile {
                name: "data.bin".into(),
                bytes: (0..size).map(|i| (i % 251) as u8).collect(),
            };
            let chunks = file.chunks().count();
            assert_eq!(chunks, size.div_ceil(FILE_CHUNK_BYTES).max(1), "{size}");
            assert_eq!(through(&file).unwrap(), file);
        }
    }

    #[test]
    fn every_chunk_fits_a_request_line() {
        let file = TaskFile { name: "a".into(), bytes: vec![0xff; FILE_CHUNK_BYTES] };
        let (_, data) = file.chunks().next().unwrap();
        let line =
            serde_json::to_string(&crate::Request::put_file("t", &file.name, 0, 1, data)).unwrap();
        assert!(line.len() < crate::MAX_REQUEST_LINE, "{}", line.len());
    }

    #[test]
    fn chunks_out_of_order_too_many_or_too_large_are_refused() {
        let mut a = Assembly::start("a.txt", 4, 0, 0).unwrap();
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        assert!(a.push(1, &b64(b"x")).unwrap_err().contains("offset 1"));
        a.push(0, &b64(b"ab")).unwrap();
        assert!(a.push(2, &b64(b"cde")).unwrap_err().contains("pass its size"));
        assert!(a.push(2, "%%%").unwrap_err().contains("not base64"));
        assert!(a.finish().unwrap_err().contains("2 of 4 bytes"));
        assert!(Assembly::start("a", MAX_FILE_BYTES + 1, 0, 0).is_err());
        assert!(Assembly::start("a", 1, MAX_FILES, 0).is_err());
        assert!(Assembly::start("a", 2, 1, MAX_FILES_BYTES - 1).is_err());
        for bad in ["../x", "a/b", ".env", "x\u{202E}fdp.exe", "", "a\0b"] {
            assert!(Assembly::start(bad, 1, 0, 0).is_err(), "{bad:?}");
        }
    }
}
