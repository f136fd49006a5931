//! Helpers shared by the host's egress tests: the listener and local servers of
//! `nexbot_tests::egress`, and the Docker helpers of [`docker`].

#![allow(dead_code)] // each test file uses a different subset

pub mod docker;

pub use nexbot_tests::egress::*;
