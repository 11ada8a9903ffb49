//! Unit tests of `udp::intake`.
