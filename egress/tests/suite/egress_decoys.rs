//! Decoy secrets at the proxy, as an injected task would use one: its placeholder in a
//! header, percent-encoded in a body behind a real secret's, to the host the real secret is
//! bound to — each refused with the very answer a secret not bound there gets, nothing sent,
//! the audit line marked `"decoy": true`, the alarm told the task, the container and the
//! request. A real secret of the same kind of name (the control) refuses without an alarm; a
//! task holding a decoy gets no tunnel; the decoy's value is in no line.

use egress_support::allow;
use nexbot_tests::egress as egress_support;

use std::sync::{Arc, Mutex};

use egress_support::{connect, start, web_echo_server, Echoed, WAIT};
use nexbot_egress::{Binding, Credential, DecoyAlarm, DecoyTrip, EgressConfig};
use secrecy::SecretString;
use serde_json::json;

const DECOY: &str = "sk-proj-DECOYvalue0123456789abcdefghijklmnopqrstuvwx";
const REAL: &str = "ghp_REALvalue0123456789abcdefghijkl";
/// A stdin-mode value of the task's: never in what the owner is told.
const PLAIN: &str = "plain-PLANTED-stdin-value-0123456789";

#[derive(Default)]
struct Recorded(Mutex<Vec<DecoyTrip>>);

impl DecoyAlarm for Recorded {
    fn tripped(&self, trip: DecoyTrip) {
        self.0.lock().unwrap().push(trip);
    }
}

#[tokio::test]
async fn a_decoy_sent_anywhere_is_refused_like_an_unbound_secret_and_rings_the_alarm() {
    let (bound, bound_seen) = web_echo_server("127.0.0.1".parse().unwrap()).await;
    let (other, other_seen) = web_echo_server("127.0.0.2".parse().unwrap()).await;
    let mut config = EgressConfig::default();
    config.proxy.allow_internal.extend([allow(bound), allow(other)]);
    let started = start(config, None).await;
    let alarm = Arc::new(Recorded::default());
    started.egress.set_decoy_alarm(alarm.clone());
    let real = Binding::parse("127.0.0.1").unwrap();
    let t1 = vec![
        Credential::new("GH_TOKEN", SecretString::from(REAL), vec![real]),
        Credential::new("PLAIN", SecretString::from(PLAIN), vec![]),
        Credential::decoy("OPENAI_API_KEY", SecretString::from(DECOY)),
    ];
    started.egress.credentials().grant("t-1", t1).unwrap();
    let client = reqwest::Client::builder().proxy(started.proxy()).timeout(WAIT).build().unwrap();

    // In a header, to any host: the same refusal a real secret not bound there gets. The task's
    // stdin-mode value beside it must not reach the owner's alert.
    let response = client
        .post(format!("http://{other}/steal?also={PLAIN}"))
        .header("authorization", "Bearer {{secret:OPENAI_API_KEY}}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let text = response.text().await.unwrap();
    let expected = "secret_not_bound: secret OPENAI_API_KEY may not be sent to 127.0.0.2";
    assert!(text.contains(expected), "{text}");
    assert!(!text.to_lowercase().contains("decoy"), "the task must not learn it was a decoy");
    // Percent-encoded in a body, behind a real secret the bound host may get in its URL.
    let response = client
        .post(format!("http://{bound}/echo?k={{{{secret:GH_TOKEN}}}}"))
        .body("keys=%7B%7Bsecret%3AOPENAI_API_KEY%7D%7D")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    // In the URL of a body too large to be read: caught before the size refuses it.
    let response = client
        .post(format!("http://{other}/big?k={{{{secret:OPENAI_API_KEY}}}}"))
        .body(vec![b'x'; nexbot_egress::MAX_SECRET_BODY_BYTES + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    // The real secret alone still goes where it is bound.
    let response =
        client.get(format!("http://{bound}/echo?k={{{{secret:GH_TOKEN}}}}")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let seen: Vec<Echoed> = bound_seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "only the real secret's request arrived: {seen:?}");
    assert!(other_seen.lock().unwrap().is_empty(), "nothing reached the other host");

    // The control: a real secret (stdin mode, the same kind of name) sent where it may not go
    // is refused as before, and rings nothing.
    started.run_task("t-2");
    let t2 = vec![Credential::new("OPENAI_API_KEY", SecretString::from(REAL), vec![])];
    started.egress.credentials().grant("t-2", t2).unwrap();
    let response = client
        .get(format!("http://{other}/x"))
        .header("x-key", "{{secret:OPENAI_API_KEY}}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    // A task holding only a decoy gets no tunnel, as with a proxy-mode secret.
    started.run_task("t-3");
    let t3 = vec![Credential::decoy("STRIPE_SECRET_KEY", SecretString::from(DECOY))];
    started.egress.credentials().grant("t-3", t3).unwrap();
    let (code, _) = connect(started.egress.local_addr(), &other.to_string()).await;
    assert_eq!(code, 403, "a tunnel would hide what the task sends");

    let trips = alarm.0.lock().unwrap().clone();
    assert_eq!(trips.len(), 3, "{trips:?}");
    assert_eq!(trips[0].task_id.as_deref(), Some("t-1"));
    assert_eq!(trips[0].container.as_deref(), Some("c-test"));
    assert_eq!(trips[0].secret, "OPENAI_API_KEY");
    let told = format!("POST http://127.0.0.2:{}/steal?also=[REDACTED:PLAIN]", other.port());
    assert_eq!(trips[0].request, told);
    assert!(trips[1].request.starts_with("POST http://127.0.0.1:"), "{:?}", trips[1]);
    assert!(trips[2].request.contains("/big?k="), "{:?}", trips[2]);

    let lines = started.audit_lines(6).await;
    let decoys: Vec<_> = lines.iter().filter(|l| l["decoy"] == true).collect();
    assert_eq!(decoys.len(), 3, "{lines:?}");
    for line in &decoys {
        assert_eq!(line["verdict"], "denied");
        assert_eq!(line["secrets"], json!(["OPENAI_API_KEY"]));
        assert_eq!(line["resolved"], serde_json::Value::Null, "nothing was dialled");
    }
    let audit = std::fs::read_to_string(started.egress.audit_path()).unwrap();
    assert!(!audit.contains(DECOY) && !audit.contains("DECOYvalue"), "{audit}");
    assert!(!audit.contains(PLAIN), "{audit}");
}
