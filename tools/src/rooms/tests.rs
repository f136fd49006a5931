use super::*;

fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nxh-rooms-{tag}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

#[test]
fn room_names_are_readable_safe_and_tell_every_chat_apart() {
    let name = |text: &str| room_name(&text.parse::<ChatRef>().unwrap());
    assert_eq!(name("telegram:12345"), "telegram_12345");
    assert_eq!(name("telegram:-100200"), "telegram_-100200");
    assert_eq!(name("console:default"), "console_default");
    assert_eq!(name("console:my.bot"), "console_my_2ebot");
    assert_eq!(name("console:a_b"), "console_a_5fb");
    assert_eq!(name("console:.."), "console__2e_2e");
    // Injective over names that an unescaped `_` or `.` would mix up.
    let chats = [
        "console:a_2e",
        "console:a.",
        "console:a_",
        "console:a__",
        "console:a-",
        "console:telegram_1",
        "telegram:1",
        "console:1",
        "telegram:-1",
        "console:-1",
    ];
    let names: std::collections::BTreeSet<String> = chats.iter().map(|c| name(c)).collect();
    assert_eq!(names.len(), chats.len(), "{names:?}");
    for room in &names {
        assert!(!room.contains('/') && !room.starts_with('.'), "{room}");
        assert!(room.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'));
    }
    let longest = name(&format!("console:{}", ".".repeat(64)));
    assert!(longest.len() <= 255, "a file name: {}", longest.len());
}

/// An older install's data directory: the daemon's files, the operator's, a backup the
/// operator made, and the user's work (a loose note and a folder of notes).
fn older_install(dir: &Path) {
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    };
    for (name, text) in nexbot_agent::workspace::BOOTSTRAP_FILES {
        write(name, text.as_bytes());
    }
    write("HEARTBEAT.md", b"# Heartbeat");
    write("config.toml", b"[llm]");
    write("config.toml.bak", b"[llm]");
    write("nexbot.db", b"SQLite format 3\0...");
    write("nexbot.db-wal", b"\x37\x7f\x06\x82");
    write("egress-audit.jsonl", b"{}\n");
    write("egress-audit.jsonl.1", b"{}\n");
    write("nexbot.lock", b"123");
    write("backup.sqlite", b"SQLite format 3\0...");
    // A backup under a name of no daemon kind: its content gives it away.
    write("before-upgrade", b"SQLite format 3\0...");
    write("ca/proxy.pem", b"-----BEGIN CERTIFICATE-----");
    write(".env", b"NEXBOT_LLM_API_KEY=sk-x");
    write("photo.jpg", b"\xff\xd8\xff\xe0binary");
    write("notes.txt", b"the user's notes");
    write("projects/plan.md", b"step 1");
    write("projects/deep/todo.md", b"step 2");
    write("mixed/a.md", b"text");
    write("mixed/b.bin", b"\x00\x01");
    std::os::unix::net::UnixListener::bind(dir.join("nexbot.sock")).map(drop).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.join("link.txt")).unwrap();
}

#[test]
fn an_older_installs_loose_files_move_into_the_owners_room_once() {
    let dir = tempdir("move");
    older_install(&dir);
    let owner = ChatRef::Telegram(1001);
    let keep = Keep { paths: vec![dir.join("ca/proxy.pem")] };
    let rooms = Rooms::open(&dir, &owner, &keep).unwrap();
    let room = rooms.room_dir(&owner);
    assert!(room.ends_with("chats/telegram_1001"));
    assert_eq!(std::fs::read_to_string(room.join("notes.txt")).unwrap(), "the user's notes");
    assert_eq!(std::fs::read_to_string(room.join("projects/deep/todo.md")).unwrap(), "step 2");
    assert!(!dir.join("notes.txt").exists() && !dir.join("projects").exists());
    let mut in_room: Vec<_> = std::fs::read_dir(&room)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    in_room.sort();
    assert_eq!(in_room, ["notes.txt", "projects"], "only the user's text work moves");
    // Everything else stays where the daemon and the operator expect it.
    for name in [
        "IDENTITY.md",
        "TOOLS.md",
        "USER.md",
        "MEMORY.md",
        "HEARTBEAT.md",
        "config.toml",
        "config.toml.bak",
        "nexbot.db",
        "nexbot.db-wal",
        "egress-audit.jsonl",
        "egress-audit.jsonl.1",
        "nexbot.lock",
        "nexbot.sock",
        "backup.sqlite",
        "before-upgrade",
        "ca/proxy.pem",
        ".env",
        "photo.jpg",
        "mixed/b.bin",
        "link.txt",
    ] {
        assert!(dir.join(name).symlink_metadata().is_ok(), "{name} was moved");
    }
    let marker = std::fs::read_to_string(dir.join(ROOMS_DIR).join(MOVED_MARKER)).unwrap();
    assert!(marker.contains("moved 2 entries") && marker.contains("notes.txt -> notes.txt"));

    // Once: a note the operator drops into the data directory later stays there.
    std::fs::write(dir.join("later.txt"), "the operator's").unwrap();
    Rooms::open(&dir, &owner, &keep).unwrap();
    assert!(dir.join("later.txt").exists() && !room.join("later.txt").exists());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_chats_folder_from_before_rooms_is_set_aside_not_inherited() {
    let dir = tempdir("aside");
    let owner = ChatRef::console("default").unwrap();
    // A user's folder named `chats` in the shared workspace, posing as another chat's room.
    std::fs::create_dir_all(dir.join("chats/telegram_2")).unwrap();
    std::fs::write(dir.join("chats/telegram_2/planted.md"), "for chat 2").unwrap();
    std::fs::create_dir_all(dir.join("chats.before-rooms")).unwrap();
    std::fs::write(dir.join("notes.txt"), "old").unwrap();
    let rooms = Rooms::open(&dir, &owner, &Keep::default()).unwrap();
    let aside = dir.join("chats.before-rooms-2/telegram_2/planted.md");
    assert_eq!(std::fs::read_to_string(aside).unwrap(), "for chat 2");
    let room_2 = rooms.confinement(&ChatRef::Telegram(2), false).unwrap();
    assert!(std::fs::read_dir(room_2.root()).unwrap().next().is_none(), "chat 2 starts empty");
    let own = rooms.room_dir(&owner).join("notes.txt");
    assert_eq!(std::fs::read_to_string(own).unwrap(), "old");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn free_names_keep_both_files() {
    let dir = tempdir("free");
    assert_eq!(free_name(&dir, "notes.txt"), dir.join("notes.txt"));
    std::fs::write(dir.join("notes.txt"), "").unwrap();
    assert_eq!(free_name(&dir, "notes.txt"), dir.join("notes.moved.txt"));
    std::fs::write(dir.join("notes.moved.txt"), "").unwrap();
    assert_eq!(free_name(&dir, "notes.txt"), dir.join("notes.moved-2.txt"));
    std::fs::write(dir.join("README"), "").unwrap();
    assert_eq!(free_name(&dir, "README"), dir.join("README.moved"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_taken_name_gets_a_number_before_its_extension() {
    assert_eq!(numbered("a.pdf", 1), "a.pdf");
    assert_eq!(numbered("a.pdf", 2), "a-2.pdf");
    assert_eq!(numbered("README", 3), "README-3");
}
