//! The small programs the sandbox image carries inside this binary, run by the name it was
//! started under (as busybox does): the image links them to `/bin/nexbot-subagent`, so a
//! task's commands find them on `PATH` with nothing else installed and no library to load.
//!
//! - `pdftotext IN [OUT]`: the text of a PDF (`pdf-extract`), into `OUT` (`-`: stdout; by
//!   default `IN` with `.txt` for its extension, as poppler's `pdftotext` does). A file a user
//!   sent is untrusted: it is parsed here, in the sandbox, never on the host, and a parser
//!   panic is an error message, not a crash report.
//! - `imgconv IN [OUT [MAX_EDGE]]`: a PNG or JPEG's format and size; with `OUT`, the image
//!   written as PNG or JPEG (by `OUT`'s extension), scaled down so its longer side is at most
//!   `MAX_EDGE` pixels when given. Decoded within limits ([`IMAGE_MAX_EDGE`] pixels a side,
//!   [`IMAGE_MAX_ALLOC`] bytes), so a small file that claims a huge picture is refused.
//! - `selftest-implant NAME KEY`: the owner's self-test's implant ([`crate::implant`]).

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The programs, by the name they are run as.
pub const PROGRAMS: &[&str] = &["pdftotext", "imgconv", "selftest-implant"];

/// The longest side of an image `imgconv` decodes, in pixels.
pub const IMAGE_MAX_EDGE: u32 = 16_384;
/// The most memory `imgconv`'s decoder may take.
pub const IMAGE_MAX_ALLOC: u64 = 256 * 1024 * 1024;

/// Runs the program named by `argv[0]`'s last part, if it is one of [`PROGRAMS`]; `None`
/// when it is not (the binary is then the subagent).
pub fn run_as_program(args: &[OsString]) -> Option<ExitCode> {
    let name = Path::new(args.first()?).file_name()?.to_str()?;
    match name {
        "pdftotext" => Some(report("pdftotext", pdftotext(&args[1..]))),
        "imgconv" => Some(report("imgconv", imgconv(&args[1..]))),
        "selftest-implant" => Some(report("selftest-implant", crate::implant::implant(&args[1..]))),
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

const IMGCONV_USAGE: &str = "usage: imgconv IN [OUT.png|OUT.jpg [MAX_EDGE]]";

fn imgconv(args: &[OsString]) -> Result<(), String> {
    let (input, output, max_edge) = match args {
        [input] => (PathBuf::from(input), None, None),
        [input, output] => (PathBuf::from(input), Some(PathBuf::from(output)), None),
        [input, output, edge] => {
            let edge =
                edge.to_str().and_then(|e| e.parse::<u32>().ok()).filter(|e| *e > 0).ok_or_else(
                    || format!("MAX_EDGE must be a positive number; {IMGCONV_USAGE}"),
                )?;
            (PathBuf::from(input), Some(PathBuf::from(output)), Some(edge))
        }
        _ => return Err(IMGCONV_USAGE.to_owned()),
    };
    let (image, format) = open_image(&input)?;
    let (width, height) = (image.width(), image.height());
    let Some(output) = output else {
        println!("{} {width}x{height}", format.extensions_str().first().unwrap_or(&"image"));
        return Ok(());
    };
    let target = image::ImageFormat::from_path(&output)
        .ok()
        .filter(|f| matches!(f, image::ImageFormat::Png | image::ImageFormat::Jpeg))
        .ok_or_else(|| format!("{}: write a .png or a .jpg", output.display()))?;
    let image = match max_edge {
        Some(edge) if width.max(height) > edge => {
            image.resize(edge, edge, image::imageops::FilterType::Triangle)
        }
        _ => image,
    };
    // JPEG has no alpha channel.
    let image = match target {
        image::ImageFormat::Jpeg => image::DynamicImage::ImageRgb8(image.to_rgb8()),
        _ => image,
    };
    image.save_with_format(&output, target).map_err(|e| format!("{}: {e}", output.display()))?;
    println!("{width}x{height} -> {}x{} {}", image.width(), image.height(), output.display());
    Ok(())
}

/// Decodes the image at `path` within [`IMAGE_MAX_EDGE`] and [`IMAGE_MAX_ALLOC`].
fn open_image(path: &Path) -> Result<(image::DynamicImage, image::ImageFormat), String> {
    let failed = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let mut reader = image::ImageReader::open(path)
        .and_then(|r| r.with_guessed_format())
        .map_err(|e| failed(&e))?;
    let format = reader.format().ok_or_else(|| failed(&"not a PNG or JPEG image"))?;
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(IMAGE_MAX_EDGE);
    limits.max_image_height = Some(IMAGE_MAX_EDGE);
    limits.max_alloc = Some(IMAGE_MAX_ALLOC);
    reader.limits(limits);
    let image = reader.decode().map_err(|e| failed(&e))?;
    Ok((image, format))
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

    fn dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nx-imgconv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn run(args: &[&Path]) -> Result<(), String> {
        let args: Vec<OsString> = args.iter().map(|a| a.as_os_str().to_owned()).collect();
        imgconv(&args)
    }

    #[test]
    fn an_image_is_converted_and_scaled_down_and_a_too_large_one_is_refused() {
        let dir = dir();
        let png = dir.join("in.png");
        image::RgbaImage::from_pixel(400, 200, image::Rgba([200, 10, 10, 255])).save(&png).unwrap();
        let jpg = dir.join("out.jpg");
        run(&[&png, &jpg, Path::new("100")]).unwrap();
        let (out, format) = open_image(&jpg).unwrap();
        assert_eq!((format, out.width(), out.height()), (image::ImageFormat::Jpeg, 100, 50));

        let wide = dir.join("wide.png");
        image::GrayImage::new(IMAGE_MAX_EDGE + 1, 1).save(&wide).unwrap();
        let refused = run(&[&wide, &dir.join("x.png")]).unwrap_err();
        assert!(refused.contains("limit"), "{refused}");
        std::fs::write(dir.join("fake.png"), b"not an image").unwrap();
        assert!(run(&[&dir.join("fake.png")]).is_err());
        assert!(run(&[&png, &dir.join("out.gif")]).unwrap_err().contains(".png or a .jpg"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
