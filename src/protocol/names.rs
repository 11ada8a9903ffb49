//! How users type the values of the wire enums (`--pattern`, `--verify`,
//! `--shutdown`, `--pacing`, `--ecn`) and of the library's own choices
//! (`--proto`, `--profile-format`, `--jitter-format`): one table per enum, kept beside the
//! enum in the protocol layer and turned into a flag's choices by the command
//! line, so the wire types carry no command-line parser (issue 27, item 8).

/// A wire enum whose values users type by name.
pub trait Named: Copy + PartialEq + 'static {
    /// Every value: its name as typed (the same as on the wire), and a line
    /// of help for `--help`.
    const NAMES: &'static [(Self, &'static str, &'static str)];

    /// The name a user types for this value.
    fn typed(self) -> &'static str {
        Self::NAMES.iter().find(|n| n.0 == self).map_or("", |n| n.1)
    }

    /// The value a typed name stands for.
    fn from_typed(name: &str) -> Option<Self> {
        Self::NAMES.iter().find(|n| n.1 == name).map(|n| n.0)
    }
}

#[cfg(test)]
mod tests {
    use super::Named;
    use crate::protocol::sockopts::ShutdownMode;
    use crate::protocol::spec::{IoPattern, VerifyLevel};
    use crate::protocol::udp::marks::Ecn;
    use crate::protocol::udp::pace::Pacing;
    use crate::protocol::udp::scenario::Format;
    use crate::report::JitterFormat;
    use crate::rr::client::Transport;
    use serde::Serialize;

    /// Every value has one name, the one its JSON carries, and the name
    /// leads back to the value.
    fn round_trips<T: Named + Serialize + std::fmt::Debug>(count: usize) {
        assert_eq!(T::NAMES.len(), count, "a value is missing from the table");
        for &(v, name, help) in T::NAMES {
            assert_eq!(v.typed(), name);
            assert_eq!(T::from_typed(name), Some(v));
            assert_eq!(serde_json::to_value(v).unwrap(), name, "{v:?}");
            assert!(!help.is_empty());
            let same = T::NAMES.iter().filter(|n| n.1 == name || n.0 == v).count();
            assert_eq!(same, 1, "{name} twice");
        }
        assert_eq!(T::from_typed("no-such-value"), None);
        assert_eq!(T::from_typed(""), None);
    }

    #[test]
    fn every_wire_enum_names_each_value_once_as_its_json_does() {
        round_trips::<IoPattern>(4);
        round_trips::<VerifyLevel>(2);
        round_trips::<ShutdownMode>(2);
        round_trips::<Pacing>(3);
        round_trips::<Ecn>(4);
        round_trips::<JitterFormat>(2);
        round_trips::<Format>(3);
        round_trips::<Transport>(4);
    }
}
