//! A tool call's result as text the model can read: every content block in order (text as it
//! is, audio and blobs as a line naming them, never their bytes; a picture as a line, and its
//! bytes kept for a model that sees images), the structured result when there is no text,
//! control characters shown rather than obeyed ([`nexbot_core::text::visible_controls`]: an
//! escape a server sends never reaches the model as one), cut at [`MAX_RESULT_BYTES`] with the
//! cut said.

use base64::Engine as _;
use nexbot_agent::llm::Image;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};

/// Bytes of a result the model reads at most.
pub const MAX_RESULT_BYTES: usize = 64 * 1024;
/// Images one answer carries to the model at most (a screenshot is one).
pub const MAX_IMAGES: usize = 2;
/// Bytes of one image at most, decoded (a full-page screenshot of a long page is larger).
pub const MAX_IMAGE_BYTES: usize = 4 * 1024 * 1024;
/// The picture types the OpenAI-compatible APIs take as image parts.
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/webp", "image/gif"];

/// What a call answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub text: String,
    /// The server said the call failed (`isError`).
    pub is_error: bool,
    /// The text was cut at [`MAX_RESULT_BYTES`]; `original` bytes in all.
    pub cut: Option<usize>,
    /// Its pictures, in order (each also named by a line of `text`): shown to a model that
    /// sees images after the tool answers.
    pub images: Vec<Image>,
}

impl Answer {
    /// An answer of text alone.
    pub fn text(text: impl Into<String>, is_error: bool) -> Self {
        Self { text: text.into(), is_error, cut: None, images: Vec::new() }
    }
}

/// Renders `result` for the model, its pictures kept.
pub fn render(result: &CallToolResult) -> Answer {
    let mut images = Vec::new();
    let mut answer = render_blocks(result, Some(&mut images));
    answer.images = images;
    answer
}

/// An image block's picture (`mime`, its data in base64; `kept` pictures before it), for
/// the model, or why it is not shown.
fn picture(mime: &str, base64: &str, kept: usize) -> Result<Image, &'static str> {
    if !IMAGE_TYPES.contains(&mime) {
        return Err("not a picture type a model reads");
    }
    if kept >= MAX_IMAGES {
        return Err("more pictures than one answer shows");
    }
    let data =
        base64::engine::general_purpose::STANDARD.decode(base64).map_err(|_| "not valid base64")?;
    if data.len() > MAX_IMAGE_BYTES {
        return Err("larger than 4 MiB");
    }
    Ok(Image { mime: mime.to_owned(), data: std::sync::Arc::new(data) })
}

/// Renders `result`'s blocks; with `images`, its pictures are kept there.
fn render_blocks(result: &CallToolResult, mut images: Option<&mut Vec<Image>>) -> Answer {
    let mut parts: Vec<String> = Vec::new();
    for block in &result.content {
        parts.push(match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => {
                let (mime, len) = (&image.mime_type, image.data.len());
                let shown = match images.as_deref_mut() {
                    Some(kept) => picture(mime, &image.data, kept.len()).map(|p| kept.push(p)),
                    None => Err("a prompt's pictures are not shown"),
                };
                match shown {
                    Ok(()) => format!("[image: {mime}, {len} bytes of base64]"),
                    Err(why) => format!("[image: {mime}, {len} bytes of base64, not shown: {why}]"),
                }
            }
            ContentBlock::Audio(audio) => {
                format!(
                    "[audio: {}, {} bytes of base64, not shown]",
                    audio.mime_type,
                    audio.data.len()
                )
            }
            ContentBlock::Resource(embedded) => contents(&embedded.resource),
            ContentBlock::ResourceLink(link) => {
                format!("[resource link {}: {}]", link.uri, link.name)
            }
            _ => "[a content block of a kind this client does not know]".to_owned(),
        });
    }
    let has_text = result.content.iter().any(|b| matches!(b, ContentBlock::Text(_)));
    if let (false, Some(structured)) = (has_text, &result.structured_content) {
        parts.push(structured.to_string());
    }
    let text = parts.join("\n");
    let (text, cut) = cut(text);
    Answer { text, is_error: result.is_error == Some(true), cut, images: Vec::new() }
}

/// A `prompts/get` result for the model: its description, then each message as `role:` and
/// its content rendered like a call's blocks, cut like a call's.
pub fn render_prompt(prompt: &rmcp::model::GetPromptResult) -> Answer {
    let mut parts: Vec<String> = prompt.description.iter().cloned().collect();
    for message in &prompt.messages {
        let role = match message.role {
            rmcp::model::Role::User => "user",
            rmcp::model::Role::Assistant => "assistant",
        };
        let one = CallToolResult::success(vec![message.content.clone()]);
        parts.push(format!("{role}: {}", render_blocks(&one, None).text));
    }
    let (text, cut) = cut(parts.join("\n"));
    Answer { text, is_error: false, cut, images: Vec::new() }
}

/// A `resources/read` result for the model: each content in order, cut like a call's.
pub fn render_resource(read: &[ResourceContents]) -> Answer {
    let text = read.iter().map(contents).collect::<Vec<_>>().join("\n");
    let (text, cut) = cut(text);
    Answer { text, is_error: false, cut, images: Vec::new() }
}

fn contents(resource: &ResourceContents) -> String {
    match resource {
        ResourceContents::TextResourceContents { uri, text, .. } => {
            format!("[resource {uri}]\n{text}")
        }
        ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => format!(
            "[resource {uri}: {}, {} bytes of base64, not shown]",
            mime_type.as_deref().unwrap_or("binary"),
            blob.len()
        ),
        _ => "[a resource of a kind this client does not know]".to_owned(),
    }
}

/// `text` made fit for the model: its control characters shown, then cut at
/// [`MAX_RESULT_BYTES`] (after showing, so the pictures count towards the limit).
fn cut(text: String) -> (String, Option<usize>) {
    let text = match nexbot_core::text::visible_controls(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(shown) => shown,
    };
    // A string the reader already cut (`cut.rs`) says so in the text; the answer says it too.
    let read_cut = crate::cut::read_cut_bytes(&text);
    if text.len() <= MAX_RESULT_BYTES {
        return (text, read_cut);
    }
    let original = text.len().max(read_cut.unwrap_or(0));
    let mut end = MAX_RESULT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut kept = text;
    kept.truncate(end);
    kept.push_str(&format!("\n[result cut: {original} bytes in all, {end} shown]"));
    (kept, Some(original))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result the stdio reader cut while reading is still answered as cut, with the size the
    /// reader's note names.
    #[test]
    fn a_result_cut_while_read_is_answered_as_cut() {
        let text = format!("abc\n{}1048576 bytes in all]", crate::cut::READ_CUT_NOTE);
        assert_eq!(cut(text.clone()), (text, Some(1_048_576)));
        assert_eq!(cut("plain".to_owned()).1, None);
    }
    use rmcp::model::ContentBlock as Content;
    use serde_json::json;

    #[test]
    fn blocks_are_rendered_in_order_and_bytes_never_shown() {
        let result = CallToolResult::success(vec![
            Content::text("hello"),
            Content::image("QUJD".repeat(1000), "image/png"),
        ]);
        let answer = render(&result);
        assert!(answer.text.starts_with("hello\n[image: image/png, 4000 bytes"));
        assert!(!answer.text.contains("QUJD"));
        assert!(!answer.is_error);
        assert_eq!(answer.cut, None);
        // The picture's bytes are kept for a model that sees images, decoded.
        assert_eq!(answer.images.len(), 1);
        assert_eq!(answer.images[0].mime, "image/png");
        assert_eq!(answer.images[0].data.as_slice(), "ABC".repeat(1000).as_bytes());
    }

    #[test]
    fn pictures_past_the_limits_are_named_and_not_kept() {
        let big = base64::engine::general_purpose::STANDARD.encode(vec![0; MAX_IMAGE_BYTES + 1]);
        let result = CallToolResult::success(vec![
            Content::image("QUJD", "image/svg+xml"),
            Content::image("not base64!", "image/png"),
            Content::image(big, "image/png"),
            Content::image("QUJD", "image/jpeg"),
            Content::image("QUJD", "image/png"),
            Content::image("QUJD", "image/png"),
        ]);
        let answer = render(&result);
        let lines: Vec<&str> = answer.text.lines().collect();
        assert!(lines[0].ends_with("not shown: not a picture type a model reads]"), "{lines:?}");
        assert!(lines[1].ends_with("not shown: not valid base64]"), "{lines:?}");
        assert!(lines[2].ends_with("not shown: larger than 4 MiB]"), "{lines:?}");
        assert!(lines[3].ends_with("bytes of base64]") && !lines[3].contains("not shown"));
        assert!(lines[5].ends_with("not shown: more pictures than one answer shows]"));
        let kept: Vec<&str> = answer.images.iter().map(|i| i.mime.as_str()).collect();
        assert_eq!(kept, ["image/jpeg", "image/png"]);
        // A prompt's pictures are named, never kept.
        let prompt = rmcp::model::GetPromptResult::new(vec![rmcp::model::PromptMessage::new(
            rmcp::model::Role::User,
            Content::image("QUJD", "image/png"),
        )]);
        let answer = render_prompt(&prompt);
        assert!(answer.text.contains("not shown: a prompt's pictures are not shown"));
        assert!(answer.images.is_empty());
    }

    #[test]
    fn structured_content_stands_in_for_missing_text_and_errors_are_marked() {
        let result = CallToolResult::structured_error(json!({"code": 7}));
        let answer = render(&result);
        assert!(answer.is_error);
        assert!(answer.text.contains("\"code\":7"), "{}", answer.text);
    }

    #[test]
    fn control_characters_of_a_result_are_shown_not_obeyed() {
        let result = CallToolResult::success(vec![Content::text("red\x1b[31m\x07\rover\u{9b}")]);
        assert_eq!(render(&result).text, "red␛[31m␇␍over\u{FFFD}");
        let read = [ResourceContents::text("a\x1b]0;title\x07", "test://r")];
        assert_eq!(render_resource(&read).text, "[resource test://r]\na␛]0;title␇");
    }

    #[test]
    fn a_huge_result_is_cut_on_a_character_boundary_and_says_so() {
        let result = CallToolResult::success(vec![Content::text("é".repeat(MAX_RESULT_BYTES))]);
        let answer = render(&result);
        assert_eq!(answer.cut, Some(2 * MAX_RESULT_BYTES));
        assert!(answer.text.len() < MAX_RESULT_BYTES + 100);
        assert!(answer.text.ends_with("shown]"));
    }
}
