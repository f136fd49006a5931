//! A small HTTP/1.1 client over the daemon's Unix socket (hyper's connection API: one
//! connection per request, which is all a command-line tool needs).

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use serde::Serialize;
use thiserror::Error;

use crate::types::ErrorBody;

/// Why a request failed. [`ClientError::exit_code`] is what `nexbot-ctl` exits with.
#[derive(Debug, Error)]
pub enum ClientError {
    /// Nothing listens on the socket.
    #[error(
        "the nexbot daemon is not running (cannot connect to {socket}: {reason}); start it with \
         `nexbot serve` or `make up`, or point --socket / NEXBOT_SOCKET at its data directory's \
         nexbot.sock"
    )]
    NotRunning { socket: PathBuf, reason: String },
    /// The daemon is there but still starting (its parts are not up yet).
    #[error("{message}")]
    Starting { message: String },
    /// The daemon answered with an error.
    #[error("{message}")]
    Daemon { status: u16, message: String },
    /// The daemon answered something this client cannot read.
    #[error("unexpected answer from the daemon: {0}")]
    Protocol(String),
}

impl ClientError {
    /// 3 when the daemon is not running, 4 while it is starting, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::NotRunning { .. } => 3,
            Self::Starting { .. } => 4,
            Self::Daemon { .. } | Self::Protocol(_) => 1,
        }
    }
}

/// The daemon's control API at a socket path.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
}

impl Client {
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self { socket: socket.into() }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `GET path`, the answer read as `T`.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let body = self.request(http::Method::GET, path, Bytes::new()).await?;
        decode(&body)
    }

    /// `POST path` with `body` as JSON, the answer read as `T`.
    pub async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let body = serde_json::to_vec(body).map_err(|e| ClientError::Protocol(e.to_string()))?;
        let answer = self.request(http::Method::POST, path, Bytes::from(body)).await?;
        decode(&answer)
    }

    /// `GET path` as text (`/metrics`).
    pub async fn get_text(&self, path: &str) -> Result<String, ClientError> {
        let body = self.request(http::Method::GET, path, Bytes::new()).await?;
        String::from_utf8(body.to_vec()).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    async fn request(
        &self,
        method: http::Method,
        path: &str,
        body: Bytes,
    ) -> Result<Bytes, ClientError> {
        let not_running =
            |reason: String| ClientError::NotRunning { socket: self.socket.clone(), reason };
        let stream = tokio::net::UnixStream::connect(&self.socket)
            .await
            .map_err(|e| not_running(e.to_string()))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| not_running(e.to_string()))?;
        tokio::spawn(connection);
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, "nexbot")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let response =
            sender.send_request(request).await.map_err(|e| ClientError::Protocol(e.to_string()))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))?
            .to_bytes();
        if !status.is_success() {
            return Err(match serde_json::from_slice::<ErrorBody>(&body) {
                Ok(ErrorBody { error, starting: true }) => ClientError::Starting { message: error },
                Ok(ErrorBody { error, .. }) => {
                    ClientError::Daemon { status: status.as_u16(), message: error }
                }
                Err(_) => ClientError::Daemon {
                    status: status.as_u16(),
                    message: String::from_utf8_lossy(&body).into_owned(),
                },
            });
        }
        Ok(body)
    }
}

fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, ClientError> {
    serde_json::from_slice(body).map_err(|e| ClientError::Protocol(e.to_string()))
}
