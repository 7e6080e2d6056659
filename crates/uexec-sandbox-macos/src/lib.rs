//! macOS sandbox adapter: Seatbelt profiles generated from the sandbox policy, run through `sandbox-exec`.
//!
//! **For:** turning a [`uexec_domain::SandboxPolicy`] into a Seatbelt profile and the `sandbox-exec` command
//! line that runs a command under it ([`build_launch`], or [`SeatbeltSandbox`] as the `uexec_ports::Sandbox`
//! port). Generation is plain Rust and runs on any OS, so a tool can show or test the profile on Linux.
//!
//! **Not for:** spawning (the caller runs the returned argv with its own spawner), enforcing anything off macOS
//! (where `/usr/bin/sandbox-exec` is missing, the enforcing adapter refuses with
//! `SandboxError::Unsupported` instead of running unsandboxed), or Linux sandboxing (`uexec-sandbox-linux`).
//!
//! Why it has this shape:
//! - Profile generation ([`build_launch`]) is plain Rust with no platform code, so the profile, its parameters
//!   and the command line are built and tested on any OS; the only macOS fact is that `/usr/bin/sandbox-exec`
//!   exists there. The app uses the same code for `uexec sandbox-profile --platform macos`.
//! - The profile's fixed parts are data files (`seatbelt_base.sbpl`, `seatbelt_network.sbpl`) that a reviewer can
//!   read as SBPL; the generated part only lists parameter references.
//! - Paths reach the profile only as `-D` parameters, never spliced into its text, and they are canonical
//!   (`/tmp` is `/private/tmp` on macOS), because Seatbelt matches resolved paths. The file system is read
//!   through the plan's one view of the host (`uexec_plan::HostView`), and what stays read-only in git
//!   directories is the plan's (`uexec_plan::GitPlanner`), rendered here as denied paths; tests stand in for
//!   macOS's symlinks with `uexec_plan::FakeHost`.
//! - [`SeatbeltSandbox`] implements the `uexec_ports::Sandbox` port on every OS, but refuses to prepare a
//!   command where `sandbox-exec` cannot run (unless built for inspection): a missing sandbox is a typed
//!   error, never a silent fallback to no sandbox.
//!
//! # Example
//!
//! ```
//! use std::ffi::OsString;
//!
//! use uexec_domain::SandboxPolicy;
//! use uexec_sandbox_macos::{SANDBOX_EXEC, SeatbeltSandbox};
//!
//! let workspace = tempfile::tempdir()?;
//! let argv: Vec<OsString> = vec!["make".into(), "test".into()];
//! let policy = SandboxPolicy::WorkspaceWrite {
//!     writable_roots: Vec::new(),
//!     network_access: false,
//!     exclude_slash_tmp: true,
//!     exclude_tmpdir_env_var: true,
//! };
//! let launch = SeatbeltSandbox::for_inspection().launch(&policy, workspace.path(), None, &argv)?;
//!
//! // `sandbox-exec -p <profile> -DWRITABLE_ROOT_0=... -- make test`: the paths are parameters, never profile
//! // text, and the command follows `--` unchanged.
//! assert_eq!(launch.argv[0], OsString::from(SANDBOX_EXEC));
//! assert!(launch.profile.contains("(param \"WRITABLE_ROOT_0\")"));
//! assert!(!launch.profile.contains(&*workspace.path().to_string_lossy()));
//! assert_eq!(launch.argv[launch.argv.len() - 2..], argv[..]);
//! // The workspace is the one writable root; it has no `.git` or `.uexec` yet, so neither is protected (`git
//! // init` works) and the report says so; only the other tools' files (`.vscode`, `.mcp.json`, ...) are read-only.
//! // Once `.git` exists, what git runs or reads as configuration in it is read-only too.
//! let tools = uexec_domain::tool_files::TOOL_ENTRIES.len();
//! assert_eq!(launch.writable_root_count(), 1);
//! assert_eq!(launch.read_only_subpath_count(), tools);
//! assert_eq!(launch.absent.len(), 2);
//! std::fs::create_dir(workspace.path().join(".git"))?;
//! let launch = SeatbeltSandbox::for_inspection().launch(&policy, workspace.path(), None, &argv)?;
//! assert!(launch.read_only_subpath_count() > tools);
//! assert!(launch.params.iter().any(|(_, path)| path.to_string_lossy().ends_with(".git/hooks")));
//!
//! // The enforcing adapter refuses where `sandbox-exec` cannot run, instead of running unsandboxed.
//! assert_eq!(SeatbeltSandbox::default().unavailable_reason().is_none(), cfg!(target_os = "macos"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod extras;
mod nested;
mod profile;
mod sandbox;
mod spelling;

pub use extras::{Extras, MACOS_SECRETS, extend_launch};
pub use nested::nested_sandbox_hint;

pub use profile::{SANDBOX_EXEC, SeatbeltLaunch, build_launch, build_launch_with};
pub use sandbox::SeatbeltSandbox;
