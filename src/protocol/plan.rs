//! The I/O plan of one TCP connection: which end sends how much, in what order.
//!
//! Both ends derive the same plan from the test spec, so neither needs to tell
//! the other when a turn ends — the byte counts say it. The plan is a pure
//! iterator of [`Step`]s from one end's point of view.

use crate::protocol::proto::IoPattern;

/// Which end of the connection a plan is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The end that connected.
    Client,
    /// The end that accepted.
    Server,
}

/// One step of a plan, from the point of view of one end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Send this many bytes.
    Send(u64),
    /// Receive exactly this many bytes.
    Recv(u64),
    /// Send and receive at the same time.
    Both {
        /// Bytes to send.
        send: u64,
        /// Bytes to receive.
        recv: u64,
    },
}

/// Bytes each way for a connection: (client to server, server to client).
pub fn expected_bytes(pattern: IoPattern, transfer: u64, push: u64, pull: u64) -> (u64, u64) {
    let mut c2s = 0;
    let mut s2c = 0;
    for step in Plan::new(pattern, transfer, push, pull, Role::Client) {
        match step {
            Step::Send(n) => c2s += n,
            Step::Recv(n) => s2c += n,
            Step::Both { send, recv } => {
                c2s += send;
                s2c += recv;
            }
        }
    }
    (c2s, s2c)
}

/// Iterator over the steps of one end's plan.
#[derive(Debug, Clone)]
pub struct Plan {
    pattern: IoPattern,
    remaining: u64,
    push: u64,
    pull: u64,
    role: Role,
    next_is_push: bool,
}

impl Plan {
    /// Builds the plan. For pushpull, `push`/`pull` of zero are treated as one
    /// byte so the plan always terminates (the CLI rejects zero earlier).
    pub fn new(pattern: IoPattern, transfer: u64, push: u64, pull: u64, role: Role) -> Plan {
        Plan {
            pattern,
            remaining: transfer,
            push: push.max(1),
            pull: pull.max(1),
            role,
            next_is_push: true,
        }
    }

    fn step_for(&self, client_sends: bool, n: u64) -> Step {
        match (self.role, client_sends) {
            (Role::Client, true) | (Role::Server, false) => Step::Send(n),
            _ => Step::Recv(n),
        }
    }
}

impl Iterator for Plan {
    type Item = Step;

    fn next(&mut self) -> Option<Step> {
        if self.remaining == 0 {
            return None;
        }
        let total = self.remaining;
        match self.pattern {
            IoPattern::Push => {
                self.remaining = 0;
                Some(self.step_for(true, total))
            }
            IoPattern::Pull => {
                self.remaining = 0;
                Some(self.step_for(false, total))
            }
            IoPattern::Duplex => {
                self.remaining = 0;
                let c2s = total - total / 2;
                let s2c = total / 2;
                Some(match self.role {
                    Role::Client => Step::Both {
                        send: c2s,
                        recv: s2c,
                    },
                    Role::Server => Step::Both {
                        send: s2c,
                        recv: c2s,
                    },
                })
            }
            IoPattern::Pushpull => {
                let push = self.next_is_push;
                let n = total.min(if push { self.push } else { self.pull });
                self.remaining -= n;
                self.next_is_push = !push;
                Some(self.step_for(push, n))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn simple_patterns() {
        let p = |pat, role| Plan::new(pat, 100, 0, 0, role).collect::<Vec<_>>();
        assert_eq!(p(IoPattern::Push, Role::Client), vec![Step::Send(100)]);
        assert_eq!(p(IoPattern::Push, Role::Server), vec![Step::Recv(100)]);
        assert_eq!(p(IoPattern::Pull, Role::Client), vec![Step::Recv(100)]);
        assert_eq!(
            Plan::new(IoPattern::Duplex, 101, 0, 0, Role::Client).collect::<Vec<_>>(),
            vec![Step::Both { send: 51, recv: 50 }]
        );
        assert_eq!(
            Plan::new(IoPattern::Duplex, 101, 0, 0, Role::Server).collect::<Vec<_>>(),
            vec![Step::Both { send: 50, recv: 51 }]
        );
    }

    #[test]
    fn pushpull_alternates_and_truncates() {
        let c: Vec<_> = Plan::new(IoPattern::Pushpull, 25, 10, 4, Role::Client).collect();
        assert_eq!(
            c,
            vec![Step::Send(10), Step::Recv(4), Step::Send(10), Step::Recv(1)]
        );
        assert_eq!(expected_bytes(IoPattern::Pushpull, 25, 10, 4), (20, 5));
    }

    proptest! {
        #[test]
        fn ends_mirror_and_sum_to_transfer(pat in 0usize..4, t in 0u64..1_000_000,
                                           push in 1u64..5000, pull in 1u64..5000) {
            let pat = [IoPattern::Push, IoPattern::Pull, IoPattern::Pushpull, IoPattern::Duplex][pat];
            let c: Vec<_> = Plan::new(pat, t, push, pull, Role::Client).collect();
            let s: Vec<_> = Plan::new(pat, t, push, pull, Role::Server).collect();
            prop_assert_eq!(c.len(), s.len());
            for (a, b) in c.iter().zip(&s) {
                let mirrored = match *a {
                    Step::Send(n) => Step::Recv(n),
                    Step::Recv(n) => Step::Send(n),
                    Step::Both { send, recv } => Step::Both { send: recv, recv: send },
                };
                prop_assert_eq!(mirrored, *b);
            }
            let (c2s, s2c) = expected_bytes(pat, t, push, pull);
            prop_assert_eq!(c2s + s2c, t);
        }
    }
}
