//! The operator's actions in the chained audit: every request of the control API
//! (`nexbot-ctl`) and the dashboard that is not a read (a `POST`: a kill, a restart, a secret
//! set or removed, a job added or removed, a skill allowed, a reload, an answer) becomes an
//! `operator` line of the egress's audit file — its method, path and status, never a body (a
//! secret's value travels in one).
//!
//! Why a layer and not a call in each handler: an action added later is audited without
//! anyone remembering to.

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use nexbot_core::audit::AuditEvent;

use super::ControlState;

/// For the control API's router: actions of `nexbot-ctl` (the socket's owner).
pub(crate) async fn by_ctl(
    State(s): State<ControlState>,
    request: Request,
    next: Next,
) -> Response {
    audited(&s, Actor::Ctl, request, next).await
}

/// For the dashboard's router: actions of a logged-in viewer. A request refused (no session,
/// no CSRF token: any page the owner's browser visits can send one) is no action and is not
/// written; an action done answers with a redirect (303).
pub(crate) async fn by_dashboard(
    State(s): State<ControlState>,
    request: Request,
    next: Next,
) -> Response {
    audited(&s, Actor::Dashboard, request, next).await
}

/// Whose request: the socket's owner, whose every request is theirs (a refused one too), or
/// the dashboard's, whose refused requests need not be the owner's at all.
#[derive(Clone, Copy)]
enum Actor {
    Ctl,
    Dashboard,
}

async fn audited(s: &ControlState, actor: Actor, request: Request, next: Next) -> Response {
    let acts = !matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let subject = format!("{} {}", request.method(), request.uri().path());
    let response = next.run(request).await;
    let (name, refused) = match actor {
        Actor::Ctl => ("nexbot-ctl", false),
        Actor::Dashboard => ("the dashboard", response.status().is_client_error()),
    };
    if let (true, false, Some(trail)) = (acts, refused, &s.0.trail) {
        trail.record(AuditEvent {
            event: "operator",
            actor: name.to_owned(),
            chat: None,
            subject,
            outcome: response.status().as_u16().to_string(),
        });
    }
    response
}
