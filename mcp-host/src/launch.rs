//! How an instance starts: a stdio server's container (hardened by the pool, the chat's room
//! mounted when it has one, its own limits) and its session over the container's stdio, or a
//! remote server's door into the egress proxy and its session through it; then its identity at
//! the proxy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nexbot_docker::ServiceSpec;
use nexbot_mcp::{McpError, ServerConfig, Session};

use crate::{identity, serves, Key, McpServers, RemoteExit, Running, ScanHold, LABEL_SERVER, ROLE};

impl McpServers {
    /// Starts the instance: a stdio server's container and session, or a remote server's
    /// door and session; then registers its identity.
    pub(super) async fn launch(
        &self,
        config: &ServerConfig,
        key: &Key,
    ) -> Result<Running, McpError> {
        let running = match config.is_remote() {
            true => self.launch_remote(config, key).await?,
            false => self.launch_stdio(config, key).await?,
        };
        tracing::info!(
            server = %config.name,
            container = running.container().unwrap_or("(remote)"),
            serves = %serves(key),
            tools = running.session.tools().len(),
            skipped = running.session.skipped().len(),
            info = running.session.server_info().unwrap_or(""),
            "MCP server up"
        );
        let identity = identity(key);
        if let Some(service) = &running.service {
            if let Some(ip) = service.address() {
                self.egress.addresses.set_dedicated(ip, service.name(), identity.clone());
            }
        }
        if let (Some(questions), Some(chat)) = (self.questions.get(), &key.1) {
            let what = format!("MCP server {}", config.name);
            questions.server_started(&identity, chat, &what);
        }
        Ok(running)
    }

    /// A remote server: its door into the proxy (with the values its URL and headers name),
    /// then the session through it.
    async fn launch_remote(&self, config: &ServerConfig, key: &Key) -> Result<Running, McpError> {
        let doors = self.egress.doors.as_ref().ok_or_else(|| {
            McpError::Start(
                "a remote MCP server is reached through the egress proxy, which is not running"
                    .into(),
            )
        })?;
        let (credentials, holds) = self.remote_secrets(config)?;
        let door = doors
            .open(&identity(key), credentials)
            .map_err(|e| McpError::Start(format!("the proxy's door: {e}")))?;
        let timeout = Duration::from_secs(config.start_timeout_secs);
        let session = nexbot_mcp::remote::connect(config, door.path(), timeout).await?;
        let exit = RemoteExit { _door: door, _holds: holds };
        Ok(Running { session, service: None, _door: Some(Arc::new(exit)), started: Instant::now() })
    }

    /// The operator's secrets a remote server's URL and headers name: proxy mode only (bound
    /// to hosts), so the value goes nowhere but where its binding says.
    fn remote_secrets(
        &self,
        config: &ServerConfig,
    ) -> Result<(Vec<nexbot_egress::Credential>, Vec<ScanHold>), McpError> {
        let mut text = config.url.clone().unwrap_or_default();
        for value in config.headers.values() {
            text.push('\n');
            text.push_str(value);
        }
        let (mut credentials, mut holds) = (Vec::new(), Vec::new());
        for name in nexbot_egress::placeholder_names(&text) {
            let source = self.egress.secrets.as_ref().ok_or_else(|| {
                McpError::Start(format!(
                    "its headers name the secret {name}, and the secrets vault is off (set \
                     NEXBOT_MASTER_KEY)"
                ))
            })?;
            let resolved = source.resolve_operator(&name).map_err(|e| {
                McpError::Start(format!(
                    "its headers name the secret {name}: {e} (nexbot-ctl secrets set {name} \
                     --operator --host HOST)"
                ))
            })?;
            if !resolved.proxy {
                return Err(McpError::Start(format!(
                    "its headers name the secret {name}, which must be bound to the server's \
                     host so that only the proxy fills it in (nexbot-ctl secrets set {name} \
                     --operator --host HOST)"
                )));
            }
            let credential = nexbot_egress::Credential::new(name, resolved.value, resolved.hosts);
            credentials.push(match resolved.confirm {
                true => credential.confirmed_first(),
                false => credential,
            });
            holds.push(resolved.hold);
        }
        Ok((credentials, holds))
    }

    /// Starts the container and the session; removes the container when the session fails.
    async fn launch_stdio(&self, config: &ServerConfig, key: &Key) -> Result<Running, McpError> {
        let (user, mounts) = self.room_mount(config, key).await?;
        let spec = ServiceSpec {
            role: ROLE.to_owned(),
            service: format!("mcp:{}", config.name),
            name: format!("mcp-{}", config.name),
            image: config.image().to_owned(),
            command: config.command_line(),
            env: config
                .env
                .iter()
                .chain(&self.egress.proxy_env)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            labels: [
                (LABEL_SERVER.to_owned(), config.name.clone()),
                ("nexbot.mcp.scope".to_owned(), config.scope.as_str().to_owned()),
            ]
            .into(),
            user,
            mounts,
            limits: service_limits(&config.limits),
        };
        let (service, io) =
            self.pool.start_service(&spec).await.map_err(|e| McpError::Start(e.to_string()))?;
        let timeout = Duration::from_secs(config.start_timeout_secs);
        // Through the bounded transport: a huge answer is cut as it is read, never held whole.
        let transport = nexbot_mcp::stdio::transport(io.stdout, io.stdin);
        match Session::connect(&config.name, transport, timeout).await {
            Ok(session) => Ok(Running {
                session,
                service: Some(service),
                _door: None,
                started: Instant::now(),
            }),
            Err(e) => {
                // What it wrote before it failed says why (a missing package, a bad argument).
                let said = service.logs().last().cloned();
                service.stop().await;
                Err(match said {
                    Some(line) => McpError::Start(format!(
                        "{e}; its last stderr line: {}",
                        nexbot_core::text::excerpt(&line)
                    )),
                    None => e,
                })
            }
        }
    }
}

/// A server's own limits as the pool takes them (MiB to bytes).
fn service_limits(limits: &nexbot_mcp::ServerLimits) -> nexbot_docker::ServiceLimits {
    const MIB: u64 = 1024 * 1024;
    nexbot_docker::ServiceLimits {
        memory_bytes: limits.memory_mb.map(|mb| (mb * MIB) as i64),
        pids_limit: limits.pids.map(|pids| pids as i64),
        tmp_size_bytes: limits.tmp_mb.map(|mb| mb * MIB),
    }
}
