//! Rooms: which chat a container belongs to.
//!
//! Why: the clean room between tasks is the only wall inside a container, so a container that
//! ran a task of one chat never runs a task of another. A container starts **blank** (started,
//! attached, pinged, never used); the first task it is handed binds it to that task's room for
//! the rest of its life. The pool knows a room only as an opaque key: the host names it (a
//! chat's `ChatRef`), this crate only compares keys.

use std::fmt;

/// The room a task runs in and a container belongs to: an opaque, non-empty key.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Room(String);

/// The room of [`Pool::execute`](crate::Pool::execute) and
/// [`Pool::execute_with_progress`](crate::Pool::execute_with_progress): callers that name no
/// room (tools, tests, benches) share this one.
pub const DEFAULT_ROOM: &str = "default";

impl Room {
    /// A room named `key`; an empty key is [`DEFAULT_ROOM`].
    pub fn new(key: impl Into<String>) -> Self {
        let key = key.into();
        if key.is_empty() {
            Self(DEFAULT_ROOM.to_owned())
        } else {
            Self(key)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Room {
    fn default() -> Self {
        Self(DEFAULT_ROOM.to_owned())
    }
}

impl fmt::Display for Room {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Room {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Room({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_key_is_the_default_room() {
        assert_eq!(Room::new(""), Room::default());
        assert_eq!(Room::default().as_str(), DEFAULT_ROOM);
        assert_eq!(Room::new("telegram:42").to_string(), "telegram:42");
        assert_ne!(Room::new("telegram:42"), Room::new("telegram:43"));
    }
}
