//! `read_skill`: lists and reads the skills mounted under `SKILLS_PATH`.
//!
//! A skill is a directory holding a `SKILL.md` (with an optional front-matter `description:`).
//! The model lists them first, then reads the one it needs, so that the whole library never
//! sits in the context.

use std::path::Path;

use serde::Deserialize;

use super::{ToolError, ToolOutput};

#[derive(Debug, Deserialize)]
pub struct SkillArgs {
    /// The skill to read; absent or empty lists them.
    #[serde(default)]
    pub name: Option<String>,
}

pub async fn read_skill(root: &Path, args: SkillArgs) -> Result<ToolOutput, ToolError> {
    match args.name.as_deref().map(str::trim).filter(|n| !n.is_empty()) {
        None => list(root).await,
        Some(name) => read(root, name).await,
    }
}

async fn list(root: &Path) -> Result<ToolOutput, ToolError> {
    let mut dir = match tokio::fs::read_dir(root).await {
        Ok(dir) => dir,
        Err(_) => {
            return Ok(ToolOutput::plain(format!(
                "no skills available ({} not found)",
                root.display()
            )))
        }
    };
    let mut skills = Vec::new();
    while let Ok(Some(entry)) = dir.next_entry().await {
        let file = entry.path().join("SKILL.md");
        let Ok(text) = tokio::fs::read_to_string(&file).await else { continue };
        let name = entry.file_name().to_string_lossy().into_owned();
        match description(&text) {
            Some(d) => skills.push(format!("{name}: {d}")),
            None => skills.push(name),
        }
    }
    skills.sort();
    if skills.is_empty() {
        return Ok(ToolOutput::plain("no skills available".to_owned()));
    }
    Ok(ToolOutput::plain(format!(
        "skills (read one with read_skill name=...):\n{}",
        skills.join("\n")
    )))
}

async fn read(root: &Path, name: &str) -> Result<ToolOutput, ToolError> {
    let plain = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.');
    if !plain {
        return Err(ToolError::Invalid(format!(
            "skill name {name:?} must be a plain directory name (letters, digits, '-', '_', '.')"
        )));
    }
    let file = root.join(name).join("SKILL.md");
    match tokio::fs::read_to_string(&file).await {
        Ok(text) => Ok(ToolOutput::plain(text)),
        Err(_) => Err(ToolError::Failed(format!(
            "no skill named {name:?}; call read_skill without a name to list them"
        ))),
    }
}

/// The `description:` of a `SKILL.md` front matter, if it has one.
fn description(text: &str) -> Option<String> {
    let rest = text.strip_prefix("---")?;
    let front = &rest[..rest.find("\n---")?];
    front.lines().find_map(|line| {
        let value = line.trim().strip_prefix("description:")?.trim().trim_matches('"');
        (!value.is_empty()).then(|| value.chars().take(200).collect())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lists_with_descriptions_and_reads_by_name() {
        let root = std::env::temp_dir().join(format!("nxs-skills-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("weather")).unwrap();
        std::fs::write(
            root.join("weather/SKILL.md"),
            "---\nname: weather\ndescription: \"Get a forecast\"\n---\nCall the API.",
        )
        .unwrap();
        std::fs::create_dir_all(root.join("not-a-skill")).unwrap();
        let listed = read_skill(&root, SkillArgs { name: None }).await.unwrap();
        assert!(listed.text.ends_with("weather: Get a forecast"), "{}", listed.text);
        assert!(!listed.text.contains("not-a-skill"));
        let read = read_skill(&root, SkillArgs { name: Some("weather".into()) }).await.unwrap();
        assert!(read.text.ends_with("Call the API."));
        let bad = read_skill(&root, SkillArgs { name: Some("../etc".into()) }).await.unwrap_err();
        assert!(matches!(bad, ToolError::Invalid(_)));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
