//! What a sandbox enforces, as a value the caller can read (spec B1): every exec response and
//! `uexec sandbox-report` can show it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which sandbox mechanism ran a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxKind {
    /// No sandbox.
    None,
    /// Linux: Landlock filesystem rules plus a seccomp filter.
    LinuxLandlockSeccomp,
    /// macOS: Seatbelt through `sandbox-exec`.
    MacosSeatbelt,
}

impl SandboxKind {
    /// The value of `UEXEC_SANDBOX` for a command under this sandbox.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxKind::None => "none",
            SandboxKind::LinuxLandlockSeccomp => "linux-landlock-seccomp",
            SandboxKind::MacosSeatbelt => "macos-seatbelt",
        }
    }
}

/// The state of one protection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProtectionStatus {
    /// Fully enforced.
    Enforced,
    /// Enforced only in part (degraded: the policy accepted that explicitly).
    Partial,
    /// Not enforced.
    Off,
    /// The policy does not ask for it.
    NotRequested,
}

/// One protection and its state, e.g. `filesystem: enforced (landlock ABI 7, 5 writable roots)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Protection {
    /// Short stable name: `filesystem`, `network`, `no_new_privs`, `ptrace`, `io_uring`, `seatbelt`, ...
    pub name: String,
    /// Its state.
    pub status: ProtectionStatus,
    /// Free text for a person: the mechanism and its parameters.
    pub detail: String,
}

/// What a sandbox enforces (or would enforce) for one command.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProtectionReport {
    /// The mechanism.
    pub sandbox: SandboxKind,
    /// The sandbox policy's mode (`read-only`, `workspace-write`, `danger-full-access`).
    pub policy: String,
    /// Every protection, in a stable order.
    pub protections: Vec<Protection>,
    /// Why the command runs outside the sandbox, when it does.
    pub escape_reason: Option<crate::policy::EscapeReason>,
}

impl ProtectionReport {
    /// The report for a command that runs with no sandbox, for the given reason.
    pub fn unsandboxed(policy: &str, reason: crate::policy::EscapeReason) -> Self {
        ProtectionReport {
            sandbox: SandboxKind::None,
            policy: policy.to_owned(),
            protections: Vec::new(),
            escape_reason: Some(reason),
        }
    }

    /// True when any protection is only partially enforced or off.
    pub fn is_degraded(&self) -> bool {
        self.protections.iter().any(|p| matches!(p.status, ProtectionStatus::Partial | ProtectionStatus::Off))
    }

    /// One line with every detail: `sandbox: linux-landlock-seccomp (workspace-write); filesystem: enforced (...); ...`.
    pub fn summary_line(&self) -> String {
        self.to_string()
    }

    /// A short line for every response, without the details (they cost the model tokens on every call):
    /// `linux-landlock-seccomp (workspace-write): all 10 protections enforced, network blocked`. Protections
    /// that are not fully enforced are named with their state; `uexec sandbox-report` shows the details.
    pub fn compact_line(&self) -> String {
        let mut line = format!("{} ({})", self.sandbox.as_str(), self.policy);
        if let Some(reason) = self.escape_reason {
            line.push_str(": unsandboxed, ");
            line.push_str(escape_reason_text(reason));
            return line;
        }
        let requested: Vec<&Protection> =
            self.protections.iter().filter(|p| p.status != ProtectionStatus::NotRequested).collect();
        let weak: Vec<String> = requested
            .iter()
            .filter(|p| p.status != ProtectionStatus::Enforced)
            .map(|p| format!("{} {}", p.name, p.status))
            .collect();
        if weak.is_empty() {
            line.push_str(&format!(": all {} protections enforced", requested.len()));
        } else {
            let enforced = requested.len() - weak.len();
            line.push_str(&format!(
                ": {enforced} of {} protections enforced; {}",
                requested.len(),
                weak.join(", ")
            ));
        }
        match self.protections.iter().find(|p| p.name == "network").map(|p| p.status) {
            Some(ProtectionStatus::NotRequested) => line.push_str(", network allowed"),
            Some(ProtectionStatus::Enforced) => line.push_str(", network blocked"),
            _ => {}
        }
        line
    }
}

fn escape_reason_text(reason: crate::policy::EscapeReason) -> &'static str {
    match reason {
        crate::policy::EscapeReason::FullAccessPolicy => "danger-full-access policy",
        crate::policy::EscapeReason::ApprovedEscalation => "escalation approved",
        crate::policy::EscapeReason::RetryAfterDenial => "retry after sandbox denial, approved",
    }
}

impl fmt::Display for ProtectionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProtectionStatus::Enforced => "enforced",
            ProtectionStatus::Partial => "partial",
            ProtectionStatus::Off => "off",
            ProtectionStatus::NotRequested => "not requested",
        })
    }
}

impl fmt::Display for ProtectionReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sandbox: {} ({})", self.sandbox.as_str(), self.policy)?;
        if let Some(reason) = self.escape_reason {
            write!(f, "; unsandboxed: {}", escape_reason_text(reason))?;
        }
        for p in &self.protections {
            write!(f, "; {}: {}", p.name, p.status)?;
            if !p.detail.is_empty() {
                write!(f, " ({})", p.detail)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::EscapeReason;

    #[test]
    fn summary_line_names_every_protection() {
        let report = ProtectionReport {
            sandbox: SandboxKind::LinuxLandlockSeccomp,
            policy: "workspace-write".into(),
            protections: vec![
                Protection {
                    name: "filesystem".into(),
                    status: ProtectionStatus::Enforced,
                    detail: "landlock ABI 7".into(),
                },
                Protection {
                    name: "network".into(),
                    status: ProtectionStatus::Enforced,
                    detail: String::new(),
                },
            ],
            escape_reason: None,
        };
        assert_eq!(
            report.summary_line(),
            "sandbox: linux-landlock-seccomp (workspace-write); filesystem: enforced (landlock ABI 7); network: enforced"
        );
        assert!(!report.is_degraded());
        assert_eq!(
            report.compact_line(),
            "linux-landlock-seccomp (workspace-write): all 2 protections enforced, network blocked"
        );
        let mut weak = report.clone();
        weak.protections[0].status = ProtectionStatus::Partial;
        weak.protections[1].status = ProtectionStatus::NotRequested;
        assert_eq!(
            weak.compact_line(),
            "linux-landlock-seccomp (workspace-write): 0 of 1 protections enforced; filesystem partial, network allowed"
        );
        let open = ProtectionReport::unsandboxed("danger-full-access", EscapeReason::FullAccessPolicy);
        assert_eq!(
            open.summary_line(),
            "sandbox: none (danger-full-access); unsandboxed: danger-full-access policy"
        );
    }
}
