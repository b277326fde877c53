//! Tests that own their process: `/metrics` counts since the process started and its global
//! recorder, and the global tracing subscriber capturing every log line, cannot share a process
//! with other tests (their requests would move the counters and fill the log this binary checks),
//! so they are a second test binary rather than modules of `tests/it`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../it/common/mod.rs"]
mod common;

mod operating;
