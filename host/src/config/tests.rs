//! The config's tests: loading, the environment's overrides, every refusal naming its key.

use super::*;
use secrecy::ExposeSecret;

fn load(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    Config::from_parts(text, Path::new("test.toml"), Path::new("/base"), env)
}

#[test]
fn search_settings_are_checked_naming_the_key() {
    let backend = load("[search]\nurl = \"http://searx:8080/search\"\n", &[]).unwrap();
    let backend = backend.search.backend().unwrap();
    assert_eq!((backend.kind.as_str(), backend.key_secret), ("searxng", None));
    assert!(load("", &[]).unwrap().search.backend().is_none(), "off by default");
    let err = load("[search]\nurl = \"https://u:p@api.example/s\"\n", &[]).unwrap_err();
    assert!(
        err.to_string().contains("search.url") && err.to_string().contains("search.api_key_secret"),
        "{err}"
    );
    let err = load("[search]\nkind = \"bing\"\n", &[]).unwrap_err().to_string();
    assert!(err.contains("search.kind") && err.contains("searxng"), "{err}");
    let brave =
        "[search]\nkind = \"brave\"\nurl = \"https://api.search.brave.com/res/v1/web/search\"\n";
    let err = load(brave, &[]).unwrap_err().to_string();
    assert!(err.contains("search.api_key_secret"), "{err}");
    let err = load(&format!("{brave}api_key_secret = \"lower\"\n"), &[]).unwrap_err().to_string();
    assert!(err.contains("search.api_key_secret"), "{err}");
}

#[test]
fn the_block_limit_has_a_default_a_range_and_an_override() {
    // Absent (an older config.toml): the protocol's default.
    assert_eq!(load("", &[]).unwrap().subagent.max_blocked_commands, 3);
    let config = load("[subagent]\nmax_blocked_commands = 5\n", &[]).unwrap();
    assert_eq!(config.subagent.max_blocked_commands, 5);
    let env = [("NEXBOT_SUBAGENT__MAX_BLOCKED_COMMANDS", "7")];
    assert_eq!(load("", &env).unwrap().subagent.max_blocked_commands, 7);
    let err = load("[subagent]\nmax_blocked_commands = 0\n", &[]).unwrap_err().to_string();
    assert!(err.contains("subagent.max_blocked_commands") && err.contains("0 is out of range"));
}

#[test]
fn the_search_budget_has_a_default_a_range_and_an_override() {
    // Absent (an older config.toml): the protocol's default.
    assert_eq!(load("", &[]).unwrap().subagent.search_budget, 20);
    let config = load("[subagent]\nsearch_budget = 5\n", &[]).unwrap();
    assert_eq!(config.subagent.search_budget, 5);
    let env = [("NEXBOT_SUBAGENT__SEARCH_BUDGET", "7")];
    assert_eq!(load("", &env).unwrap().subagent.search_budget, 7);
    for wrong in [0, 101] {
        let err =
            load(&format!("[subagent]\nsearch_budget = {wrong}\n"), &[]).unwrap_err().to_string();
        assert!(err.contains("subagent.search_budget"), "{err}");
    }
}

#[test]
fn rooms_have_defaults_an_override_and_reach_the_pool() {
    // Absent (an older config.toml): half the pool per chat, 15 minutes idle.
    let config = load("", &[]).unwrap();
    let pool = config.pool_config();
    assert_eq!((pool.max_containers_per_room, pool.room_idle_secs), (0, 900));
    assert_eq!(pool.room_limit(), 2);
    let env = [("NEXBOT_SUBAGENT__MAX_CONTAINERS_PER_CHAT", "3")];
    let config = load("[subagent]\nchat_idle_secs = 60\n", &env).unwrap();
    let pool = config.pool_config();
    assert_eq!((pool.room_limit(), pool.room_idle_secs), (3, 60));
    let err = load("[subagent]\nchat_idle_secs = 0\n", &[]).unwrap_err().to_string();
    assert!(err.contains("subagent.chat_idle_secs"), "{err}");
}

#[test]
fn an_invalid_pool_setting_names_its_subagent_key_and_its_variable() {
    let err = load("[subagent]\npool_name = \"bad name!\"\n", &[]).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("subagent.pool_name") && text.contains("bad name!"), "{text}");
    let err = load("", &[("NEXBOT_SUBAGENT__POOL_SIZE", "0")]).unwrap_err().to_string();
    assert!(
        err.contains("subagent.pool_size") && err.contains("NEXBOT_SUBAGENT__POOL_SIZE"),
        "{err}"
    );
    let err = load("[subagent]\nskills_dir = \"relative/skills\"\n", &[]).unwrap_err();
    assert!(err.to_string().contains("subagent.skills_dir"), "{err}");
}

#[test]
fn an_empty_override_keeps_the_files_value() {
    let config = load("[llm]\nmodel = \"from-file\"\n", &[("NEXBOT_LLM__MODEL", "")]).unwrap();
    assert_eq!(config.llm.model, "from-file");
    let config = load("[telegram]\nowner = 42\n", &[("NEXBOT_TELEGRAM__OWNER", "")]).unwrap();
    assert_eq!(config.telegram.owner, Some(42));
    assert!(load("", &[("NEXBOT_LLM_API_KEY", "")]).unwrap().secrets.llm_api_key.is_none());
}

#[test]
fn empty_file_gives_safe_defaults() {
    let config = load("", &[]).unwrap();
    assert_eq!(config.agent.max_iterations, 20);
    assert_eq!(config.workspace.dir, Path::new("/base/."));
    assert!(config.secrets.llm_api_key.is_none());
}

#[test]
fn the_search_backend_is_allowed_without_a_question() {
    let mut config = Config::default();
    config.search.url = "http://searxng.lan:8080/search".into();
    let allow = config.egress_config().allow;
    assert_eq!(allow.iter().map(ToString::to_string).collect::<Vec<_>>(), ["searxng.lan:8080"]);
    config.search.url = "https://[2001:db8::5]/search".into();
    assert_eq!(config.egress_config().allow[0].to_string(), "[2001:db8::5]:443");
    assert!(Config::default().egress_config().allow.is_empty());
}

#[test]
fn generated_template_parses_to_the_defaults_and_names_every_key() {
    let template = crate::workspace::CONFIG_TEMPLATE;
    let config = load(template, &[]).unwrap();
    let mut expected = Config::default();
    expected.workspace.dir = PathBuf::from("/base/.");
    // A new install (the template) asks; a config without the key keeps `open`.
    expected.egress.mode = Some(crate::egress::EgressMode::Ask);
    // A new install plants decoys; a config without the key plants none.
    expected.vault.decoys =
        crate::vault::decoys::DEFAULT_DECOYS.iter().map(|n| n.to_string()).collect();
    assert_eq!(config, expected);
    assert_eq!(Config::default().egress.effective_mode(), crate::egress::EgressMode::Open);
    // Every key of the defaults (nested tables included), and the optional ones, appears
    // (maybe commented) in it, under its own table header.
    fn documented(template: &str, section: &str, keys: &toml::Table) {
        assert!(template.contains(&format!("\n[{section}]\n")), "[{section}] undocumented");
        for (key, value) in keys {
            match value.as_table() {
                Some(table) => documented(template, &format!("{section}.{key}"), table),
                None => assert!(
                    template.contains(&format!("\n{key} = ")),
                    "{section}.{key} undocumented"
                ),
            }
        }
    }
    let defaults = toml::Table::try_from(Config::default()).unwrap();
    for (section, keys) in &defaults {
        documented(template, section, keys.as_table().unwrap());
    }
    let optional =
        ["max_tokens", "temperature", "llm_model", "listen_addr", "provider_base_url", "dir"];
    for key in optional {
        assert!(template.contains(&format!("# {key} = ")), "{key} undocumented");
    }
}

#[test]
fn mcp_servers_are_read_from_the_file_or_the_environment_and_checked() {
    let file = "[[mcp.servers]]\nname = \"memory\"\ncommand = \"mcp-server-memory\"\n\
                env = { MEMORY_FILE_PATH = \"/tmp/m.jsonl\" }\nscope = \"shared\"\n";
    let config = load(file, &[]).unwrap();
    let server = &config.mcp.servers[0];
    assert_eq!(server.command_line(), ["mcp-server-memory"]);
    assert_eq!(server.scope, nexbot_mcp::ServerScope::Shared);
    assert_eq!(server.env["MEMORY_FILE_PATH"], "/tmp/m.jsonl");
    // Appended to a generated file (whose `[mcp]` holds only comments), as people do.
    let appended = format!("{}\n{file}", crate::workspace::CONFIG_TEMPLATE);
    assert_eq!(load(&appended, &[]).unwrap().mcp.servers.len(), 1);
    let env = [("NEXBOT_MCP__SERVERS", r#"[{ name = "e", command = "mcp-server-everything" }]"#)];
    let config = load("", &env).unwrap();
    assert_eq!(config.mcp.servers[0].name, "e");
    let err = load("[[mcp.servers]]\nname = \"a__b\"\ncommand = \"x\"\n", &[]).unwrap_err();
    assert!(err.to_string().contains("mcp.servers[0].name"), "{err}");
    // A remote server: a url, and headers that may name secrets; credentials in the URL are
    // refused.
    let remote = "[[mcp.servers]]\nname = \"a\"\nurl = \"https://x/mcp\"\nheaders = { \
                  Authorization = \"Bearer {{secret:TOKEN}}\" }\n";
    let config = load(remote, &[]).unwrap();
    assert_eq!(config.mcp.servers[0].url.as_deref(), Some("https://x/mcp"));
    let err = load("[[mcp.servers]]\nname = \"a\"\nurl = \"https://u:p@x/mcp\"\n", &[]);
    assert!(err.unwrap_err().to_string().contains("mcp.servers[0].url"));
    let room = |path: &str| {
        load(&format!("[[mcp.servers]]\nname = \"f\"\ncommand = \"x\"\nroom = \"{path}\"\n"), &[])
    };
    assert_eq!(room("/room").unwrap().mcp.servers[0].room.as_deref(), Some("/room"));
    for bad in ["room", "/tmp", "/a/../etc", "/room:ro"] {
        let err = room(bad).unwrap_err().to_string();
        assert!(err.contains("mcp.servers[0].room"), "{bad}: {err}");
    }
}

/// `[browser]` on: one more MCP server (chat-scoped, the room, its own limits), never written
/// back as an `[[mcp.servers]]` entry; a server of the operator's by that name is refused.
#[test]
fn the_browser_is_an_mcp_server_of_the_daemons_own_when_on() {
    let off = load("", &[]).unwrap();
    assert!(off.mcp_servers().is_empty());
    let on = load("[browser]\nenabled = true\nmemory_mb = 768\n", &[]).unwrap();
    let servers = on.mcp_servers();
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0].name, "browser");
    assert_eq!(servers[0].limits.memory_mb, Some(768));
    assert!(on.mcp.servers.is_empty(), "not an operator's entry");
    let env = [("NEXBOT_BROWSER__ENABLED", "true")];
    assert_eq!(load("", &env).unwrap().mcp_servers()[0].name, "browser");
    let taken = "[browser]\nenabled = true\n[[mcp.servers]]\nname = \"browser\"\ncommand = \"x\"\n";
    let err = load(taken, &[]).unwrap_err().to_string();
    assert!(err.contains("browser.enabled"), "{err}");
    let err = load("[browser]\nenabled = true\npids = 8\n", &[]).unwrap_err().to_string();
    assert!(err.contains("browser.pids"), "{err}");
}

#[test]
fn skills_settings_are_checked_and_the_folder_falls_back_to_the_subagents() {
    let hash = format!("sha256:{}", "ab".repeat(32));
    let config = load(&format!("[skills]\nallow_hashes = [\"{hash}\"]\n"), &[]).unwrap();
    assert_eq!(config.skills.allow_hashes, vec![hash.clone()]);
    assert_eq!(config.skills_dir(), None);
    let pool = config.pool_config();
    assert_eq!(pool.env.get("NEXBOT_SKILLS_ALLOW"), Some(&hash));
    let err = load("[skills]\nallow_hashes = [\"sha256:XYZ\"]\n", &[]).unwrap_err();
    assert!(err.to_string().contains("skills.allow_hashes"), "{err}");
    let err = load("[skills]\ndir = \"rel\"\n", &[]).unwrap_err();
    assert!(err.to_string().contains("skills.dir"), "{err}");
    let config = load("[subagent]\nskills_dir = \"/srv/skills\"\n", &[]).unwrap();
    assert_eq!(config.skills_dir(), Some(PathBuf::from("/srv/skills")));
    let config = load("", &[("NEXBOT_SKILLS__DIR", "/skills")]).unwrap();
    assert_eq!(config.skills_dir(), Some(PathBuf::from("/skills")));
}

#[test]
fn unknown_key_is_refused_naming_it() {
    let err = load("[llm]\nmodle = \"x\"\n", &[]).unwrap_err().to_string();
    assert!(err.contains("`llm.modle`"), "{err}");
    assert!(err.contains("unknown field"), "{err}");
    let err = load("[lmm]\n", &[]).unwrap_err().to_string();
    assert!(err.contains("`lmm`"), "{err}");
}

#[test]
fn wrong_type_is_refused_naming_key_and_reason() {
    let err = load("[agent]\nmax_iterations = \"many\"\n", &[]).unwrap_err().to_string();
    assert!(err.contains("`agent.max_iterations`"), "{err}");
    assert!(err.contains("invalid type"), "{err}");
}

#[test]
fn bad_values_are_refused_naming_key_and_reason() {
    let err = load("[agent]\nmax_iterations = 0\n", &[]).unwrap_err().to_string();
    assert_eq!(err, "config key `agent.max_iterations`: 0 is out of range (allowed 1..=1000)");
    let err = load("[agent]\nask_timeout_secs = 0\n", &[]).unwrap_err().to_string();
    assert!(err.contains("`agent.ask_timeout_secs`") && err.contains("out of range"), "{err}");
    let err = load("[llm]\nbase_url = \"ftp://x\"\n", &[]).unwrap_err().to_string();
    assert!(err.contains("`llm.base_url`") && err.contains("http://"), "{err}");
    let err = load("[llm]\nbase_url = \"https://u:p@x\"\n", &[]).unwrap_err().to_string();
    assert!(err.contains("credentials") && !err.contains("u:p"), "{err}");
    let err = load("[logging]\nformat = \"xml\"\n", &[]).unwrap_err().to_string();
    assert!(err.contains("`logging.format`"), "{err}");
}

#[test]
fn syntax_errors_name_the_file() {
    let err = load("[llm\n", &[]).unwrap_err().to_string();
    assert!(err.starts_with("config file test.toml is not valid TOML"), "{err}");
}

#[test]
fn env_overrides_win_and_are_typed() {
    let config = load(
        "[llm]\nmodel = \"a\"\n",
        &[
            ("NEXBOT_LLM__MODEL", "b"),
            ("NEXBOT_AGENT__MAX_ITERATIONS", "7"),
            ("NEXBOT_SUBAGENT__ENABLED", "false"),
            ("NEXBOT_CONFIG", "ignored.toml"),
            ("HOME", "/root"),
        ],
    )
    .unwrap();
    assert_eq!(config.llm.model, "b");
    assert_eq!(config.agent.max_iterations, 7);
    assert!(!config.subagent.enabled);
}

#[test]
fn skills_dir_reaches_the_pool_config() {
    let config = load("", &[("NEXBOT_SUBAGENT__SKILLS_DIR", "/srv/nexbot/skills")]).unwrap();
    let pool = config.pool_config();
    assert_eq!(pool.skills_dir.as_deref(), Some(Path::new("/srv/nexbot/skills")));
    assert_eq!(load("", &[]).unwrap().pool_config().skills_dir, None);
}

#[test]
fn bad_env_override_names_the_variable() {
    let err = load("", &[("NEXBOT_AGENT__MAX_ITERATIONS", "0")]).unwrap_err().to_string();
    assert!(err.contains("`agent.max_iterations` (from NEXBOT_AGENT__MAX_ITERATIONS)"), "{err}");
    let err = load("", &[("NEXBOT_LLM__NOPE", "1")]).unwrap_err().to_string();
    assert!(err.contains("`llm.nope` (from NEXBOT_LLM__NOPE)"), "{err}");
    let err = load("", &[("NEXBOT_A__B__C", "1")]).unwrap_err().to_string();
    assert!(err.contains("NEXBOT_A__B__C"), "{err}");
}

#[test]
fn a_secret_too_short_to_redact_is_refused_naming_its_variable() {
    for var in [LLM_API_KEY_ENV, TELEGRAM_TOKEN_ENV, MASTER_KEY_ENV] {
        let err = load("", &[(var, "short")]).unwrap_err().to_string();
        assert!(err.contains(var) && err.contains("at least 8"), "{err}");
        assert!(!err.contains("short\""), "the value is not echoed: {err}");
    }
    assert!(load("", &[(LLM_API_KEY_ENV, "")]).is_ok(), "empty means unset");
    assert!(load("", &[(LLM_API_KEY_ENV, "12345678")]).is_ok());
}

#[test]
fn secrets_come_from_env_and_never_show_in_debug() {
    let config = load(
        "",
        &[
            (LLM_API_KEY_ENV, "sk-planted-123"),
            (TELEGRAM_TOKEN_ENV, "tg-planted-456"),
            (MASTER_KEY_ENV, "mk-planted-789"),
        ],
    )
    .unwrap();
    assert_eq!(config.secrets.llm_api_key.as_ref().unwrap().expose_secret(), "sk-planted-123");
    let debug = format!("{config:?} {config:#?}");
    for planted in ["sk-planted-123", "tg-planted-456", "mk-planted-789"] {
        assert!(!debug.contains(planted), "{planted} in {debug}");
    }
    assert!(debug.contains("[set]"));
}

#[test]
fn nested_env_overrides_reach_egress_tables() {
    let config = load(
        "[egress.proxy]\nallow_domains = [\"example.com\"]\n",
        &[
            ("NEXBOT_EGRESS__PORT", "0"),
            ("NEXBOT_EGRESS__FIREWALL", "false"),
            ("NEXBOT_EGRESS__PROXY__ALLOW_DOMAINS", r#"["*.example.org"]"#),
            ("NEXBOT_EGRESS__PROXY__ALLOW_INTERNAL", r#"[{ cidr = "10.9.8.7", ports = [81] }]"#),
            ("NEXBOT_EGRESS__RELAY__SEND_PROVIDER_KEY_TO_SUBAGENTS", "true"),
        ],
    )
    .unwrap();
    let egress = &config.egress;
    assert_eq!((egress.port, egress.firewall), (0, false));
    assert_eq!(egress.proxy.allow_domains[0].to_string(), "*.example.org");
    assert!(egress.proxy.allow_internal[0].matches("10.9.8.7".parse().unwrap(), 81));
    assert!(egress.relay.send_provider_key_to_subagents);

    let err = load("", &[("NEXBOT_EGRESS__PROXY__ALLOW_DOMAIN", "[]")]).unwrap_err();
    let err = err.to_string();
    assert!(
        err.contains("`egress.proxy.allow_domain` (from NEXBOT_EGRESS__PROXY__ALLOW_DOMAIN)"),
        "{err}"
    );
    let err = load("", &[("NEXBOT_EGRESS__PROXY__ALLOW_INTERNAL", "[{ cidr = \"nope\" }]")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("(from NEXBOT_EGRESS__PROXY__ALLOW_INTERNAL)"), "{err}");
    assert!(err.contains("invalid CIDR"), "{err}");
    let err = load("", &[("NEXBOT_EGRESS__PORT__X", "1")]).unwrap_err().to_string();
    assert!(err.contains("NEXBOT_EGRESS__PORT__X") && err.contains("`egress.port`"), "{err}");
    let err = load("", &[("NEXBOT_EGRESS____PORT", "1")]).unwrap_err().to_string();
    assert!(err.contains("NEXBOT_EGRESS____PORT"), "{err}");
}

#[test]
fn egress_defaults_are_safe_and_follow_the_main_llm() {
    let config = load("[llm]\nbase_url = \"http://llm.example:8080/v1\"\n", &[]).unwrap();
    let egress = config.egress_config();
    assert!(egress.firewall && egress.require_attribution);
    assert!(egress.proxy.allow_internal.is_empty());
    assert!(!egress.relay.send_provider_key_to_subagents);
    assert_eq!(egress.relay.provider_base_url.as_deref(), Some("http://llm.example:8080/v1"));
    assert_eq!(config.subagent_provider_base_url(), "http://llm.example:8080/v1");
    assert_eq!(config.egress_audit_path(), Path::new("/base/./egress-audit.jsonl"));
    let config = load(
        "[egress.relay]\nprovider_base_url = \"https://other.example/v1\"\n",
        &[("NEXBOT_STORAGE__DATABASE", "state/db.sqlite")],
    )
    .unwrap();
    assert_eq!(
        config.egress_config().relay.provider_base_url.as_deref(),
        Some("https://other.example/v1")
    );
    assert_eq!(config.egress_audit_path(), Path::new("/base/./state/egress-audit.jsonl"));
}

#[test]
fn bad_egress_values_are_refused_naming_the_key() {
    let err = load("[egress.proxy]\nmax_duration_secs = 0\n", &[]).unwrap_err().to_string();
    assert!(err.contains("`egress.proxy.max_duration_secs`"), "{err}");
    let err = load("[egress.relay]\nprovider_base_url = \"https://h/v1?key=sk-x\"\n", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("`egress.relay.provider_base_url`"), "{err}");
    // The relay forwards to llm.base_url by default, so that key is named.
    let err = load("[llm]\nbase_url = \"https://h/v1?x=1\"\n", &[]).unwrap_err().to_string();
    assert!(err.contains("`llm.base_url`") && err.contains("relay"), "{err}");
    let err = load("[egress]\naudit_file = \"../log\"\n", &[]).unwrap_err().to_string();
    assert!(err.contains("`egress.audit_file`"), "{err}");
    let err = load("[egress]\nfirewal = true\n", &[]).unwrap_err().to_string();
    assert!(err.contains("`egress.firewal`") && err.contains("unknown field"), "{err}");
    let err =
        load("[egress.relay]\napi_key_env = \"NEXBOT_LLM__KEY\"\n", &[]).unwrap_err().to_string();
    assert!(err.contains("`egress.relay.api_key_env`"), "{err}");
    // The old per-subagent URL is gone: subagents reach the LLM through the relay.
    let err = load("[subagent]\nllm_base_url = \"http://x/v1\"\n", &[]).unwrap_err();
    assert!(err.to_string().contains("`subagent.llm_base_url`"), "{err}");
}

#[test]
fn the_relay_key_is_the_llm_key_unless_another_variable_is_named() {
    let config = load("", &[(LLM_API_KEY_ENV, "sk-main-1")]).unwrap();
    let key = config.secrets.relay_provider_key.as_ref().unwrap();
    assert_eq!(key.expose_secret(), "sk-main-1");
    let config = load(
        "[egress.relay]\napi_key_env = \"NXW_PROVIDER_KEY\"\n",
        &[(LLM_API_KEY_ENV, "sk-main-1"), ("NXW_PROVIDER_KEY", "sk-relay-2")],
    )
    .unwrap();
    let key = config.secrets.relay_provider_key.as_ref().unwrap();
    assert_eq!(key.expose_secret(), "sk-relay-2");
    assert!(!format!("{config:?}").contains("sk-relay-2"));
    let config = load("[egress.relay]\napi_key_env = \"NXW_UNSET\"\n", &[]).unwrap();
    assert!(config.secrets.relay_provider_key.is_none());
}

/// The `config.toml` that `nexbot init` wrote on 2026-11-22 (v1). Operators have it on disk,
/// so it must keep loading, and meaning the same, after every later change. Never edit the
/// fixture: a change that needs it edited breaks their files too.
const CONFIG_V1: &str = include_str!("../../tests/fixtures/config-v1.toml");

fn load_v1(env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    Config::from_parts(CONFIG_V1, Path::new("config-v1.toml"), Path::new("/srv/nexbot"), env)
}

#[test]
fn config_written_by_v1_init_still_loads() {
    let config = load_v1(&[]).expect("the v1 config.toml must keep loading");
    assert_eq!(config.workspace.dir, Path::new("/srv/nexbot/."));
    assert_eq!(config.database_path(), Path::new("/srv/nexbot/./nexbot.db"));
    assert_eq!(config.agent.max_iterations, 20);
    // Added later: an old file without it gets the default.
    assert_eq!(config.agent.ask_timeout_secs, 300);
    assert_eq!(config.llm.base_url, "https://api.z.ai/api/paas/v4");
    assert_eq!(config.llm.model, "glm-4.7-flash");
    assert_eq!((config.llm.max_tokens, config.llm.temperature), (None, None));
    let bus = &config.bus;
    assert_eq!((bus.inbound_capacity, bus.outbound_capacity, bus.per_chat_queue), (64, 64, 8));
    assert_eq!(bus.max_parallel_turns, 4);
    let subagent = &config.subagent;
    assert!(subagent.enabled);
    assert_eq!(subagent.pool_name, "nexbot");
    assert_eq!((subagent.pool_size, subagent.task_timeout_secs), (4, 300));
    assert_eq!(subagent.max_blocked_commands, 3, "a key the v1 file lacks: its default");
    assert_eq!(subagent.search_budget, 20, "a key the v1 file lacks: its default");
    assert_eq!(
        (subagent.image.as_str(), subagent.network.as_str()),
        ("nexbot-subagent:dev", "nexbot-subagents")
    );
    assert_eq!(config.subagent_llm_model(), "glm-4.7-flash");
    let egress = config.egress_config();
    assert_eq!((egress.port, egress.listen_addr), (3128, None));
    assert!(egress.firewall && egress.require_attribution);
    assert_eq!(config.egress_audit_path(), Path::new("/srv/nexbot/./egress-audit.jsonl"));
    let allow: Vec<String> = egress.proxy.allow_domains.iter().map(|d| d.to_string()).collect();
    assert_eq!(allow, ["*"]);
    assert!(egress.proxy.deny_domains.is_empty() && egress.proxy.allow_internal.is_empty());
    let relay = &egress.relay;
    assert_eq!(relay.provider_base_url.as_deref(), Some("https://api.z.ai/api/paas/v4"));
    assert_eq!(relay.api_key_env, "NEXBOT_LLM_API_KEY");
    assert_eq!(relay.default_token_budget, 200_000);
    assert!(!relay.send_provider_key_to_subagents);
    assert_eq!((config.logging.level.as_str(), config.logging.format.as_str()), ("info", "text"));
    assert!(config.secrets.llm_api_key.is_none());
}

#[test]
fn v1_environment_names_still_apply_to_the_v1_config() {
    // Spelled out, not taken from the constants: these are the names in operators'
    // environments and compose files.
    let config = load_v1(&[
        ("NEXBOT_LLM__MODEL", "gpt-4o-mini"),
        ("NEXBOT_LLM__BASE_URL", "http://localhost:11434/v1"),
        ("NEXBOT_AGENT__MAX_ITERATIONS", "30"),
        ("NEXBOT_BUS__PER_CHAT_QUEUE", "2"),
        ("NEXBOT_SUBAGENT__POOL_SIZE", "2"),
        ("NEXBOT_SUBAGENT__ENABLED", "false"),
        ("NEXBOT_EGRESS__PROXY__ALLOW_DOMAINS", r#"["*.example.org"]"#),
        ("NEXBOT_EGRESS__RELAY__DEFAULT_TOKEN_BUDGET", "1000"),
        ("NEXBOT_LOGGING__FORMAT", "json"),
        ("NEXBOT_LLM_API_KEY", "sk-v1-key"),
        ("NEXBOT_TELEGRAM_TOKEN", "tg-v1-token"),
        ("NEXBOT_MASTER_KEY", "mk-v1-key"),
    ])
    .expect("the v1 config.toml with v1 overrides must keep loading");
    assert_eq!(config.llm.model, "gpt-4o-mini");
    assert_eq!(config.llm.base_url, "http://localhost:11434/v1");
    assert_eq!(config.agent.max_iterations, 30);
    assert_eq!(config.bus.per_chat_queue, 2);
    assert_eq!(config.subagent.pool_size, 2);
    assert!(!config.subagent.enabled);
    assert_eq!(config.subagent_llm_model(), "gpt-4o-mini");
    let egress = config.egress_config();
    let allow: Vec<String> = egress.proxy.allow_domains.iter().map(|d| d.to_string()).collect();
    assert_eq!(allow, ["*.example.org"]);
    assert_eq!(egress.relay.default_token_budget, 1000);
    assert_eq!(egress.relay.provider_base_url.as_deref(), Some("http://localhost:11434/v1"));
    assert_eq!(config.logging.format, "json");
    let secret = |s: &Option<SecretString>| s.as_ref().map(|s| s.expose_secret().to_owned());
    assert_eq!(secret(&config.secrets.llm_api_key).as_deref(), Some("sk-v1-key"));
    assert_eq!(secret(&config.secrets.relay_provider_key).as_deref(), Some("sk-v1-key"));
    assert_eq!(secret(&config.secrets.telegram_token).as_deref(), Some("tg-v1-token"));
    assert_eq!(secret(&config.secrets.master_key).as_deref(), Some("mk-v1-key"));
}

#[test]
fn secrets_in_the_file_are_refused() {
    let err = load("[llm]\napi_key = \"sk-x\"\n", &[]).unwrap_err().to_string();
    assert!(err.contains("`llm.api_key`") && !err.contains("sk-x"), "{err}");
}

/// The deadlines are planned with the very graces and queue wait the pool is given.
#[test]
fn the_deadlines_are_the_pools() {
    let dir = std::env::temp_dir();
    let env = vec![("NEXBOT_AGENT__TURN_TIMEOUT_SECS".to_owned(), "400".to_owned())];
    for env in [Vec::new(), env] {
        let config = Config::from_parts("", &dir.join("config.toml"), &dir, env).unwrap();
        let pool = config.pool_config();
        let d = crate::deadlines::TaskDeadlines::plan(&config.task_limits(), None);
        assert_eq!(d.queue_wait, std::time::Duration::from_secs(pool.queue_timeout_secs));
        assert_eq!(d.hard - d.soft, std::time::Duration::from_secs(pool.hard_limit_grace_secs));
        assert_eq!(d.cancel_grace, std::time::Duration::from_millis(pool.cancel_grace_ms));
        assert_eq!(d.soft, std::time::Duration::from_secs(config.subagent.task_timeout_secs));
    }
}
