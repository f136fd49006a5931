//! The operator's web dashboard on `control.web_addr` (off by default, loopback only unless
//! `control.web_remote`): the pool live, tasks and their receipts, the questions waiting,
//! the chats' ledger, jobs, skills, secrets' names, and the few actions `nexbot-ctl` has.
//!
//! Why this shape:
//! - Every page and action calls the control API's own plain functions ([`super::ops`],
//!   [`super::cron`], [`super::approvals`], [`super::secrets`]): there is no second code
//!   path to drift, and an action from the page is the same act as one from `nexbot-ctl`.
//! - Server-rendered HTML ([`pages`], maud: every interpolation escaped) with one small
//!   script for the live parts (server-sent events carrying re-rendered fragments). The CSS
//!   and script are compiled into the binary: no build step, no CDN, works offline.
//! - Who may look is decided by [`auth`]: a one-time link from the control socket, a session
//!   cookie (HttpOnly, SameSite=Strict, named by the port, `Secure` when served beyond
//!   loopback), a CSRF token on every action, and headers that keep the pages from being
//!   framed, sniffed or made to load anything from another origin.
//! - Connections are served by [`conn`]: a header/idle timeout and a cap, so idle clients
//!   cannot hold the daemon's descriptors.

pub mod auth;
mod conn;
mod memory;
mod pages;

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::{FromRequestParts, Path as UrlPath, Query, State};
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use nexbot_control::{ApprovalAnswer, Done, SkillAllow, WebLogin};
use serde::Deserialize;

use super::{ApiError, ControlState};
use auth::{Logins, Session, SessionCookie};

/// The dashboard's half of the control state: its logins, its session cookie and the address
/// its links name.
pub struct Web {
    logins: Logins,
    cookie: SessionCookie,
    /// `http://host:port`, what a login link starts with.
    base: String,
}

impl std::fmt::Debug for Web {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Web").field("base", &self.base).finish_non_exhaustive()
    }
}

impl Web {
    /// The dashboard served on `addr` (`remote`: `control.web_remote`); its links name
    /// loopback when it listens on every address (the operator opens it on the daemon's
    /// machine or through a tunnel).
    pub fn new(addr: std::net::SocketAddr, remote: bool) -> Self {
        let host = match addr.ip() {
            ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".to_owned(),
            ip if ip.is_unspecified() => "[::1]".to_owned(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        Self {
            logins: Logins::default(),
            cookie: SessionCookie::new(addr, remote),
            base: format!("http://{host}:{}", addr.port()),
        }
    }

    /// A one-time login link (`nexbot-ctl web login`).
    pub fn login_link(&self) -> Result<WebLogin, String> {
        let token = self.logins.new_link()?;
        Ok(WebLogin {
            url: format!("{}/login?token={token}", self.base),
            expires_in_secs: auth::LOGIN_TTL.as_secs(),
        })
    }
}

/// `POST /v1/web/login` on the control socket.
pub fn login_link(state: &ControlState) -> Result<WebLogin, ApiError> {
    let web = state.0.web.as_ref().ok_or_else(|| match &state.0.web_off {
        // Set, but its port could not be taken: setting it again would not help.
        Some(why) => ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "the dashboard is off: it {why}; stop what holds that port or set another \
                 control.web_addr, then restart the daemon"
            ),
        ),
        None => ApiError::new(
            StatusCode::CONFLICT,
            "the dashboard is off: set control.web_addr (e.g. \"127.0.0.1:8088\") in \
             config.toml and restart the daemon",
        ),
    })?;
    web.login_link().map_err(ApiError::internal)
}

fn web(state: &ControlState) -> &Web {
    state.0.web.as_deref().expect("the dashboard's routes are served only when it is on")
}

/// A request with a live session: the session's id and state. Without one, the request
/// gets the login page (401) instead.
pub struct Viewer {
    id: String,
    session: Session,
}

impl std::fmt::Debug for Viewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Viewer").finish_non_exhaustive()
    }
}

impl FromRequestParts<ControlState> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &ControlState,
    ) -> Result<Self, Self::Rejection> {
        let id = parts
            .headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| web(state).cookie.session(v))
            .map(str::to_owned);
        match id.and_then(|id| web(state).logins.session(&id).map(|s| (id, s))) {
            Some((id, session)) => Ok(Viewer { id, session }),
            None => Err(login_page(StatusCode::UNAUTHORIZED, None)),
        }
    }
}

fn login_page(status: StatusCode, problem: Option<&str>) -> Response {
    (status, Html(pages::login(problem).into_string())).into_response()
}

/// An action's checks before it runs: the request comes from this dashboard's own page
/// (the browser says so where it can) and carries the session's CSRF token. `Some`: the
/// refusal to answer instead.
fn refuse_action(viewer: &Viewer, headers: &HeaderMap, csrf: &str) -> Option<Response> {
    let cross = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|site| site != "same-origin" && site != "none");
    if cross || !auth::csrf_matches(&viewer.session, csrf) {
        return Some(
            (
                StatusCode::FORBIDDEN,
                Html(
                    pages::refused(
                        "This action did not come from the dashboard's own page (no \
                 valid CSRF token). Reload the page and try again.",
                    )
                    .into_string(),
                ),
            )
                .into_response(),
        );
    }
    None
}

/// The form of an action: what carries the session's CSRF token.
trait ActionForm: serde::de::DeserializeOwned + Send {
    fn csrf(&self) -> &str;
}

/// An action's request, checked: a live session (else the login page), its form, and the
/// checks of [`refuse_action`] passed (else the refusal). Every action takes one, so none can
/// skip the checks.
struct Action<T> {
    viewer: Viewer,
    form: T,
}

impl<T: ActionForm> axum::extract::FromRequest<ControlState> for Action<T> {
    type Rejection = Response;

    async fn from_request(
        request: axum::extract::Request,
        state: &ControlState,
    ) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = request.into_parts();
        let viewer = Viewer::from_request_parts(&mut parts, state).await?;
        let headers = parts.headers.clone();
        let request = axum::extract::Request::from_parts(parts, body);
        let Form(form) =
            Form::<T>::from_request(request, state).await.map_err(IntoResponse::into_response)?;
        match refuse_action(&viewer, &headers, form.csrf()) {
            Some(refused) => Err(refused),
            None => Ok(Action { viewer, form }),
        }
    }
}

/// After an action: its message on the next page, and back to `to`.
fn done(
    state: &ControlState,
    viewer: &Viewer,
    to: &str,
    result: Result<Done, ApiError>,
) -> Response {
    let message = match result {
        Ok(done) => done.message,
        Err(e) => format!("Refused: {}", e.message),
    };
    web(state).logins.flash(&viewer.id, message);
    Redirect::to(to).into_response()
}

/// The headers of every answer: nothing framed, sniffed, cached or loaded from elsewhere, and
/// no address (a login link's token) handed on as a referrer.
async fn harden(mut response: Response) -> Response {
    const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                       connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
                       base-uri 'none'";
    let h = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Every page, action and asset of the dashboard.
pub fn router(state: ControlState) -> Router {
    Router::new()
        .route("/login", get(login))
        .route("/logout", post(logout))
        .route("/static/app.css", get(|| async { asset("text/css", pages::CSS) }))
        .route("/static/app.js", get(|| async { asset("text/javascript", pages::JS) }))
        .route("/", get(overview))
        .route("/tasks", get(tasks))
        .route("/tasks/{id}", get(task))
        .route("/questions", get(questions))
        .route("/questions/{id}/answer", post(answer))
        .route("/chats", get(chats))
        .route("/jobs", get(jobs))
        .route("/jobs/{id}/remove", post(remove_job))
        .route("/skills", get(skills))
        .route("/skills/allow", post(allow_skill))
        .route("/secrets", get(secrets))
        .route("/memory", get(memory::memory))
        .route("/memory/forget", post(memory::forget))
        .route("/subagents/{id}/{action}", post(subagent_action))
        .route("/reload", post(reload))
        .route("/metrics", get(metrics))
        .route("/events", get(events))
        .fallback(|_: Viewer| async {
            (StatusCode::NOT_FOUND, Html(pages::refused("No such page.").into_string()))
        })
        .layer(axum::middleware::map_response(harden))
        .layer(axum::middleware::from_fn_with_state(state.clone(), super::actions::by_dashboard))
        .with_state(state)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

#[derive(Debug, Deserialize)]
struct LoginQuery {
    token: Option<String>,
}

async fn login(State(s): State<ControlState>, Query(q): Query<LoginQuery>) -> Response {
    let Some(id) = q.token.as_deref().and_then(|t| web(&s).logins.log_in(t)) else {
        return login_page(
            StatusCode::UNAUTHORIZED,
            Some("This login link is used, expired or wrong; each works once, for five minutes."),
        );
    };
    tracing::info!("the dashboard: a browser logged in");
    let mut response = Redirect::to("/").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&web(&s).cookie.set(Some(&id))) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// An action's form with nothing but the token.
#[derive(Debug, Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

impl ActionForm for CsrfForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

async fn logout(
    State(s): State<ControlState>,
    Action { viewer, .. }: Action<CsrfForm>,
) -> Response {
    web(&s).logins.log_out(&viewer.id);
    let mut response = login_page(StatusCode::OK, Some("Logged out."));
    if let Ok(cookie) = HeaderValue::from_str(&web(&s).cookie.set(None)) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// A page for `viewer`, with the message the session's last action left (taken: shown once).
fn page(
    s: &ControlState,
    title: &str,
    nav: pages::Nav,
    viewer: &Viewer,
    body: maud::Markup,
) -> Response {
    let flash = web(s).logins.take_flash(&viewer.id);
    let csrf = &viewer.session.csrf;
    Html(pages::layout(title, nav, csrf, flash.as_deref(), body).into_string()).into_response()
}

async fn overview(State(s): State<ControlState>, viewer: Viewer) -> Response {
    let view = pages::OverviewData::gather(&s).await;
    page(
        &s,
        "Overview",
        pages::Nav::Overview,
        &viewer,
        pages::overview(&view, &viewer.session.csrf),
    )
}

/// The tasks page's filters (also the live stream's, so it shows the same rows).
#[derive(Debug, Default, Deserialize)]
pub struct TaskFilter {
    pub chat: Option<String>,
    pub status: Option<String>,
}

async fn tasks(
    State(s): State<ControlState>,
    viewer: Viewer,
    Query(filter): Query<TaskFilter>,
) -> Response {
    let rows = pages::task_rows(&s, &filter).await;
    page(&s, "Tasks", pages::Nav::Tasks, &viewer, pages::tasks(&filter, rows))
}

async fn task(
    State(s): State<ControlState>,
    viewer: Viewer,
    UrlPath(id): UrlPath<String>,
) -> Response {
    let body = match super::ops::task(&s, &id).await {
        Ok(detail) => {
            let logs = pages::task_logs(&s, &detail);
            pages::task(&detail, &logs)
        }
        Err(e) => pages::problem(&e.message),
    };
    page(&s, &format!("Task {id}"), pages::Nav::Tasks, &viewer, body)
}

async fn questions(State(s): State<ControlState>, viewer: Viewer) -> Response {
    let list = super::approvals::pending(&s);
    page(
        &s,
        "Questions",
        pages::Nav::Questions,
        &viewer,
        pages::questions(&list, &viewer.session.csrf),
    )
}

#[derive(Debug, Deserialize)]
struct AnswerForm {
    #[serde(default)]
    csrf: String,
    answer: String,
}

impl ActionForm for AnswerForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

async fn answer(
    State(s): State<ControlState>,
    UrlPath(id): UrlPath<i64>,
    Action { viewer, form }: Action<AnswerForm>,
) -> Response {
    let request = ApprovalAnswer { id, answer: form.answer };
    let result = super::approvals::answer_question(&s, &request, super::approvals::DASHBOARD).await;
    done(&s, &viewer, "/questions", result)
}

async fn chats(State(s): State<ControlState>, viewer: Viewer) -> Response {
    let body = match super::ops::messages(&s, false, Some(500)).await {
        Ok(list) => pages::chats(&list),
        Err(e) => pages::problem(&e.message),
    };
    page(&s, "Chats", pages::Nav::Chats, &viewer, body)
}

async fn jobs(State(s): State<ControlState>, viewer: Viewer) -> Response {
    let jobs = super::cron::jobs(&s, None).await;
    let runs = super::cron::job_runs(&s, None, Some(50)).await;
    page(
        &s,
        "Scheduled jobs",
        pages::Nav::Jobs,
        &viewer,
        pages::jobs(jobs, runs, &viewer.session.csrf),
    )
}

async fn remove_job(
    State(s): State<ControlState>,
    UrlPath(id): UrlPath<i64>,
    Action { viewer, .. }: Action<CsrfForm>,
) -> Response {
    let result = super::cron::remove_job(&s, id).await;
    done(&s, &viewer, "/jobs", result)
}

async fn skills(State(s): State<ControlState>, viewer: Viewer) -> Response {
    let list = super::ops::skills(&s).await;
    page(&s, "Skills", pages::Nav::Skills, &viewer, pages::skills(&list, &viewer.session.csrf))
}

#[derive(Debug, Deserialize)]
struct AllowForm {
    #[serde(default)]
    csrf: String,
    name: String,
    hash: String,
}

impl ActionForm for AllowForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

async fn allow_skill(
    State(s): State<ControlState>,
    Action { viewer, form }: Action<AllowForm>,
) -> Response {
    let request = SkillAllow { name: form.name, hash: Some(form.hash) };
    let result = super::ops::allow_skill(&s, &request, super::approvals::DASHBOARD).await;
    done(&s, &viewer, "/skills", result)
}

async fn secrets(State(s): State<ControlState>, viewer: Viewer) -> Response {
    let list = super::secrets::listing(&s.0.vault, None);
    page(&s, "Secrets", pages::Nav::Secrets, &viewer, pages::secrets(&list))
}

async fn subagent_action(
    State(s): State<ControlState>,
    UrlPath((id, action)): UrlPath<(String, String)>,
    Action { viewer, .. }: Action<CsrfForm>,
) -> Response {
    let result = match action.as_str() {
        "restart" => super::ops::restart(&s, &id),
        "kill" => super::ops::kill(&s, &id).await,
        other => Err(ApiError::not_found(format!("no action {other:?} (restart or kill)"))),
    };
    done(&s, &viewer, "/", result)
}

async fn reload(
    State(s): State<ControlState>,
    Action { viewer, .. }: Action<CsrfForm>,
) -> Response {
    let result = super::ops::reload(&s).await.map(|r| Done {
        message: format!(
            "Reloaded. Applied: {}. Needs a restart: {}.",
            if r.applied.is_empty() { "nothing changed".to_owned() } else { r.applied.join("; ") },
            if r.needs_restart.is_empty() {
                "nothing".to_owned()
            } else {
                r.needs_restart.join("; ")
            }
        ),
    });
    done(&s, &viewer, "/", result)
}

async fn metrics(State(s): State<ControlState>, _viewer: Viewer) -> Response {
    match super::metrics::render(&s).await {
        Ok(text) => ([(header::CONTENT_TYPE, super::metrics::CONTENT_TYPE)], text).into_response(),
        Err(e) => ApiError::internal(e).into_response(),
    }
}

/// `GET /events?view=overview|tasks[&chat=…&status=…]`: the live parts of a page, re-rendered
/// each second and sent when they changed (event `pool` or `tasks`, data: the fragment's
/// HTML). Ends when the session does.
async fn events(
    State(s): State<ControlState>,
    viewer: Viewer,
    Query(query): Query<HashMap<String, String>>,
) -> Sse<impl futures_util::Stream<Item = Result<Event, std::convert::Infallible>>> {
    let view = query.get("view").cloned().unwrap_or_default();
    let filter =
        TaskFilter { chat: query.get("chat").cloned(), status: query.get("status").cloned() };
    let start = (s, viewer, view, filter, String::new(), true);
    let stream = futures_util::stream::unfold(
        start,
        |(s, viewer, view, filter, mut last, first)| async move {
            loop {
                if !first {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                web(&s).logins.session(&viewer.id)?;
                let (name, html) = match view.as_str() {
                    "tasks" => ("tasks", pages::tasks_table(&pages::task_rows(&s, &filter).await)),
                    _ => {
                        let list = super::ops::subagents(&s).ok();
                        let summary = s.0.pool.as_deref().map(super::ops::pool_summary);
                        let off = s.0.delegation_off.as_deref();
                        let csrf = &viewer.session.csrf;
                        ("pool", pages::pool(summary.as_ref(), off, list.as_ref(), csrf))
                    }
                };
                let html = html.into_string();
                if html != last {
                    last = html.clone();
                    let event = Event::default().event(name).data(html);
                    return Some((Ok(event), (s, viewer, view, filter, last, false)));
                }
            }
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// Serves the dashboard on `listener` until `stop`, within [`conn`]'s limits.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: ControlState,
    stop: tokio_util::sync::CancellationToken,
) {
    conn::serve(listener, router(state), conn::Limits::default(), stop).await;
}
