//! How a process ended.

use serde::{Deserialize, Serialize};

/// How a process ended: with an exit code, or killed by a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitStatus {
    /// The process called `exit(code)`.
    Code(i32),
    /// The process was killed by this signal number.
    Signal(i32),
}

impl ExitStatus {
    /// The exit code a shell would report: the code itself, or `128 + signal` for a signal.
    pub fn code(self) -> i32 {
        match self {
            ExitStatus::Code(code) => code,
            ExitStatus::Signal(signal) => 128 + signal,
        }
    }

    /// True when the process exited with code 0.
    pub fn success(self) -> bool {
        self == ExitStatus::Code(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_maps_to_shell_convention() {
        assert_eq!(ExitStatus::Signal(9).code(), 137);
        assert_eq!(ExitStatus::Code(17).code(), 17);
        assert!(ExitStatus::Code(0).success());
        assert!(!ExitStatus::Signal(15).success());
    }
}
