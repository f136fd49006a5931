//! A planted secret never shows up in `Debug`, `Display` or structured (JSON) logs of the
//! protocol types, nor in the errors that validation produces.

use std::io::Write;
use std::sync::{Arc, Mutex};

use nexbot_protocol::{Request, SecretMap};
use secrecy::SecretString;

const PLANTED: &str = "PLANTED-s3cr3t-9f1c";

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn request_with_planted_secrets() -> Request {
    let json = format!(
        r#"{{"type":"execute","id":"t","task":"x","secrets":{{"API_KEY":"{PLANTED}","bad-name":"{PLANTED}"}},
            "llm_api_key":"{PLANTED}","llm_token":"{PLANTED}","egress_token":"{PLANTED}"}}"#
    );
    serde_json::from_str(&json).unwrap()
}

#[test]
fn debug_and_errors_never_show_the_value() {
    let req = request_with_planted_secrets();
    let err = req.validate(0).unwrap_err();
    let texts = [format!("{req:?}"), format!("{req:#?}"), err.to_string(), format!("{err:?}")];
    for text in texts {
        assert!(!text.contains(PLANTED), "secret leaked: {text}");
    }
    let mut map = SecretMap::new();
    map.insert("K", SecretString::from(PLANTED.to_owned()));
    assert!(!format!("{map:?}").contains(PLANTED));
}

#[test]
fn structured_logs_of_a_request_never_show_the_value() {
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt().json().with_writer(move || writer.clone()).finish();
    let req = request_with_planted_secrets();
    tracing::subscriber::with_default(subscriber, || {
        tracing::info!(request = ?req, secrets = ?req.secrets, "received");
        let err = req.validate(0).unwrap_err();
        tracing::warn!(error = %err, "refused");
    });
    let logged = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    assert!(logged.contains("received") && logged.contains("API_KEY"), "{logged}");
    assert!(!logged.contains(PLANTED), "secret leaked into logs: {logged}");
}
