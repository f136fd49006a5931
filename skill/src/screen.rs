//! The content screen: what malicious skills in public registries did, line by line.
//!
//! Flagged: piping a download into a shell or interpreter; long base64 or hex blobs, escaped
//! byte strings and decoding into a shell; password-protected archives; "ignore previous
//! instructions"-style overrides; asking to reveal, print or send a secret's value (or the
//! environment); asking to disable or get around the sandbox. A `$NAME` placeholder used where
//! a value belongs is normal and not flagged; a sentence that forbids the act ("never print
//! the token") is not flagged either.

use std::fmt;
use std::sync::OnceLock;

use regex::Regex;

/// Which kind of thing a line looked like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    PipeToShell,
    EncodedBlob,
    ProtectedArchive,
    InstructionOverride,
    SecretDisclosure,
    SandboxEscape,
    Binary,
}

impl Rule {
    /// What the rule catches, for the reason shown to the operator.
    pub fn describe(self) -> &'static str {
        match self {
            Rule::PipeToShell => "pipes a download into a shell",
            Rule::EncodedBlob => "carries an encoded blob",
            Rule::ProtectedArchive => "uses a password-protected archive",
            Rule::InstructionOverride => "tries to override the agent's instructions",
            Rule::SecretDisclosure => "asks to reveal or send a secret's value",
            Rule::SandboxEscape => "asks to disable or get around the sandbox",
            Rule::Binary => "holds a file that is not text",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Rule::PipeToShell => "pipe_to_shell",
            Rule::EncodedBlob => "encoded_blob",
            Rule::ProtectedArchive => "protected_archive",
            Rule::InstructionOverride => "instruction_override",
            Rule::SecretDisclosure => "secret_disclosure",
            Rule::SandboxEscape => "sandbox_escape",
            Rule::Binary => "binary",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One flagged line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The file of the skill, relative to its folder.
    pub file: String,
    /// 1-based; 0 for a whole file.
    pub line: usize,
    /// The line (at most 200 characters).
    pub text: String,
    pub rule: Rule,
}

struct Pattern {
    rule: Rule,
    regex: Regex,
    /// A forbidding word just before the match ("never …", "do not …") clears it.
    negatable: bool,
}

fn patterns() -> &'static [Pattern] {
    static PATTERNS: OnceLock<Vec<Pattern>> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        let p = |rule, negatable, re: &str| Pattern {
            rule,
            regex: Regex::new(&format!("(?i){re}")).expect("screen pattern compiles"),
            negatable,
        };
        const SECRET: &str =
            r"(secrets?|api[ _-]?keys?|tokens?|passwords?|passphrases?|credentials?|private[ _-]keys?)";
        const SHOW: &str = r"(reveal|print|echo|show|display|output|send|post|upload|exfiltrate|leak|paste|share|email|dump|write out|tell the user)";
        vec![
            p(
                Rule::PipeToShell,
                false,
                r"\b(curl|wget|fetch|iwr|invoke-webrequest)\b[^\n|]*\|\s*(sudo\s+)?(env\s+)?(sh|bash|zsh|ksh|dash|ash|fish|python[0-9.]*|perl|ruby|node|php|iex)\b",
            ),
            p(
                Rule::PipeToShell,
                false,
                r"\b(sh|bash|zsh|ksh|dash|ash|source|\.)\s+(-c\s+)?['\x22]?(<\(|\$\()\s*(curl|wget)\b",
            ),
            p(Rule::PipeToShell, false, r"\beval\s+['\x22]?\$\(\s*(curl|wget)\b"),
            p(Rule::EncodedBlob, false, r"[A-Za-z0-9+/_-]{100,}={0,2}"),
            p(Rule::EncodedBlob, false, r"(\\x[0-9a-f]{2}){12,}"),
            p(Rule::EncodedBlob, false, r"\b(base64|b64decode|base32|xxd\s+-r|openssl\s+enc)\b[^\n]*\|\s*(sh|bash|zsh|python[0-9.]*|perl)\b"),
            p(Rule::EncodedBlob, false, r"\bbase64\s+(-d|--decode|-D)\b"),
            p(Rule::ProtectedArchive, false, r"\b(unzip|zip|7z|7za|7zr|unrar|rar)\b[^\n]*\s(-P\s*\S+|-p\S+|--password)"),
            p(Rule::ProtectedArchive, false, r"password[- ]protected|\b(zip|rar|7z|archive)\b[^\n.]{0,40}\bpassword\b|\bpassword\b[^\n.]{0,20}\b(zip|rar|7z|archive)\b"),
            p(
                Rule::InstructionOverride,
                false,
                r"\b(ignore|disregard|forget|override|bypass)\s+(all\s+|any\s+|the\s+|your\s+|of\s+)*(previous|prior|above|earlier|preceding|system|original|developer)\s+(instructions?|prompts?|rules|messages|directions|guidelines)",
            ),
            p(Rule::InstructionOverride, false, r"\byou are now\b[^\n.]{0,30}\b(dan|jailbr|unrestricted|developer mode|no longer bound)"),
            p(Rule::InstructionOverride, false, r"\bnew system prompt\b|<\s*/?\s*system\s*>"),
            p(
                Rule::SecretDisclosure,
                true,
                &format!(r"\b{SHOW}\b[^\n.]{{0,40}}\b(the\s+)?(value|contents?)\s+of\b[^\n.]{{0,30}}\b{SECRET}"),
            ),
            p(
                Rule::SecretDisclosure,
                true,
                &format!(r"\b{SHOW}\b\s+(it|them|the|your|all|any|every|each)?\s*(raw\s+|real\s+|actual\s+|full\s+)?{SECRET}\b"),
            ),
            p(
                Rule::SecretDisclosure,
                true,
                r"\b(echo|printf|print|cat)\b[^\n|;]*\$\{?[A-Z][A-Z0-9_]*(TOKEN|KEY|SECRET|PASSWORD|PASSWD|PASS|PAT)\b",
            ),
            p(Rule::SecretDisclosure, false, r"\bprintenv\b|/proc/(self|\d+)/environ|\benv\s*\|"),
            p(
                Rule::SandboxEscape,
                true,
                r"\b(disable|turn off|switch off|bypass|escape|break out of|get around|circumvent|evade|leave)\b[^\n.]{0,30}\b(sandbox|egress|proxy|firewall|seccomp|apparmor|container|isolation)",
            ),
            p(Rule::SandboxEscape, false, r"--privileged\b|docker\.sock|\bnsenter\b|\bunset\s+(https?_proxy|all_proxy)\b|\bno_proxy\s*=\s*['\x22]?\*"),
        ]
    })
}

fn negated(before: &str) -> bool {
    const WORDS: &[&str] = &[
        "never", "not", "don't", "dont", "do not", "must not", "mustn't", "no ", "without", "nor",
        "refuse", "avoid",
    ];
    let tail: String =
        before.chars().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
    let tail = tail.to_ascii_lowercase();
    WORDS.iter().any(|w| tail.contains(w))
}

/// The flagged lines of one text file of a skill.
pub fn screen(file: &str, text: &str) -> Vec<Finding> {
    let mut findings = Vec::new();
    for (i, line) in text.lines().enumerate() {
        for pattern in patterns() {
            let hit = pattern.regex.find_iter(line).find(|m| {
                let forbidden = pattern.negatable && negated(&line[..m.start()]);
                let words = pattern.rule == Rule::EncodedBlob && is_plain_long_token(m.as_str());
                !forbidden && !words
            });
            if hit.is_some() {
                findings.push(Finding {
                    file: file.to_owned(),
                    line: i + 1,
                    text: line.trim().chars().take(200).collect(),
                    rule: pattern.rule,
                });
                break;
            }
        }
    }
    findings
}

/// A long run that is not an encoded blob: a path or identifier of words (it has few digits
/// and its letters are mostly lower case), e.g. a long `snake_case` name.
fn is_plain_long_token(s: &str) -> bool {
    if s.len() < 100 {
        return false;
    }
    let digits = s.bytes().filter(u8::is_ascii_digit).count();
    let upper = s.bytes().filter(u8::is_ascii_uppercase).count();
    let lower = s.bytes().filter(u8::is_ascii_lowercase).count();
    // Random base64 has ~40% upper, ~40% lower and ~15% digits.
    digits * 20 < s.len() && upper * 10 < lower
}
