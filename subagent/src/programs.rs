//! The small programs the sandbox image carries inside this binary, run by the name it was
//! started under (as busybox does): the image links them to `/bin/nexbot-subagent`, so a
//! task's commands find them on `PATH` with nothing else installed and no library to load.
//!
//! - `pdftotext IN [OUT]`: the text of a PDF (`pdf-extract`), into `OUT` (`-`: stdout; by
//!   default `IN` with `.txt` for its extension, as poppler's `pdftotext` does). A file a user
//!   sent is untrusted: it is parsed here, in the sandbox, never on the host, and a parser
//!   panic is an error message, not a crash report.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The programs, by the name they are run as.
pub const PROGRAMS: &[&str] = &["pdftotext"];

/// Runs the program named by `argv[0]`'s last part, if it is one of [`PROGRAMS`]; `None`
/// when it is not (the binary is then the subagent).
pub fn run_as_program(args: &[OsString]) -> Option<ExitCode> {
    let name = Path::new(args.first()?).file_name()?.to_str()?;
    match name {
        "pdftotext" => Some(report("pdftotext", pdftotext(&args[1..]))),
        _ => None,
    }
}

fn report(program: &str, result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{program}: {message}");
            ExitCode::FAILURE
        }
    }
}

const PDFTOTEXT_USAGE: &str = "usage: pdftotext IN.pdf [OUT.txt | -]";

fn pdftotext(args: &[OsString]) -> Result<(), String> {
    // poppler's layout flags are accepted and ignored: the text comes in reading order.
    let args: Vec<&OsString> =
        args.iter().filter(|a| !matches!(a.to_str(), Some("-layout" | "-raw"))).collect();
    let (input, output) = match args.as_slice() {
        [input] => (PathBuf::from(input), None),
        [input, output] => (PathBuf::from(input), Some(PathBuf::from(output))),
        _ => return Err(PDFTOTEXT_USAGE.to_owned()),
    };
    let bytes = std::fs::read(&input).map_err(|e| format!("{}: {e}", input.display()))?;
    let text = extract_pdf_text(&bytes).map_err(|e| format!("{}: {e}", input.display()))?;
    match output {
        Some(path) if path.as_os_str() == "-" => {
            std::io::stdout().write_all(text.as_bytes()).map_err(|e| format!("stdout: {e}"))
        }
        Some(path) => std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display())),
        None => {
            let path = input.with_extension("txt");
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
        }
    }
}

/// The text of the PDF `bytes`, or why there is none (not a PDF, encrypted, broken: the
/// parser's panic on a malformed file is caught and said).
pub fn extract_pdf_text(bytes: &[u8]) -> Result<String, String> {
    if !bytes.starts_with(b"%PDF") {
        return Err("not a PDF (no %PDF header)".to_owned());
    }
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let extracted = std::panic::catch_unwind(|| pdf_extract::extract_text_from_mem(bytes));
    std::panic::set_hook(hook);
    match extracted {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(e)) => Err(format!("cannot read the PDF: {e}")),
        Err(_) => Err("cannot read the PDF: the file is malformed".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pdfs_text_comes_out_and_a_broken_one_is_an_error() {
        let pdf = nexbot_tests::pdf::one_page(&["Quarterly revenue: 4.2 million", "(draft)"]);
        let text = extract_pdf_text(&pdf).unwrap();
        assert!(text.contains("Quarterly revenue: 4.2 million"), "{text:?}");
        assert!(text.contains("(draft)"), "{text:?}");
        assert!(extract_pdf_text(b"hello").unwrap_err().contains("not a PDF"));
        let mut cut = pdf.clone();
        cut.truncate(pdf.len() / 2);
        assert!(extract_pdf_text(&cut).is_err());
    }
}
