//! Most integration tests, as one test binary: a module per file, named as
//! the file (`cargo test --release --test suite rr::` runs what
//! `tests/suite/rr.rs` holds).
//!
//! One binary rather than a binary per file, because on CI's two cores each
//! binary cost a compile of the helpers in `tests/common` and a link of its
//! own, and because cargo runs test binaries one after another: each file's
//! slowest test held up the next file while the harness's other thread sat
//! idle. Here the harness packs every file's tests onto its threads.
//!
//! The tests that need the machine to themselves stay binaries of their own,
//! run before or after this one, never beside it: `tests/load.rs`,
//! `tests/profiles.rs` (limiters in network namespaces, whose queues another
//! test's traffic would fill), `tests/scale.rs` (19,000 connections, near
//! the descriptor cap), `tests/mesh.rs` (sixteen namespaces), and
//! `tests/attack_fair.rs`, `tests/rr_loops.rs` and `tests/tcp_loops.rs`
//! (which time clients alone, then beside a load, and compare).
//!
//! Tests that share something across files say so where they take it: a
//! network namespace's one-letter tag is unique in this binary, ports come
//! from `bin::free_port`, and `netns::one_at_a_time` is one lock for all.

#[path = "../common/bin.rs"]
mod bin;
#[path = "../common/mod.rs"]
mod common;
#[path = "../common/fabric.rs"]
mod fabric;
#[path = "../common/hand.rs"]
mod hand;
#[path = "../common/netns.rs"]
mod netns;
#[path = "../common/scale.rs"]
mod scale;
#[path = "../common/timing.rs"]
mod timing;
#[path = "../common/udp_relay.rs"]
mod udp_relay;

mod attack;
mod attack_core;
mod attack_relay;
mod attack_small;
mod cli;
mod cpu;
mod first_hour;
mod habits;
mod hostile;
mod html;
mod iperf2_interop;
mod iperf3_client;
mod iperf3_interop;
mod iperf3_json;
mod iperf3_more;
mod isochronous;
mod layers;
mod merge;
mod metrics;
mod packaging;
mod packaging_artifacts;
mod packaging_jobs;
mod ping_scale;
mod readme;
mod refusal_log;
mod rr;
mod schema;
mod sockopts;
mod sources;
mod tcp_engine;
mod tcp_time;
mod udp;
mod udp_offload;
mod udp_scale;
