//! macOS sandbox adapter: Seatbelt profiles generated from the sandbox policy, run through `sandbox-exec`.
//!
//! Why it has this shape:
//! - Profile generation ([`build_launch`]) is plain Rust with no platform code, so the profile, its parameters
//!   and the command line are built and tested on any OS; the only macOS fact is that `/usr/bin/sandbox-exec`
//!   exists there. The app uses the same function for `uexec sandbox-profile --platform macos`.
//! - The profile's fixed parts are data files (`seatbelt_base.sbpl`, `seatbelt_network.sbpl`) that a reviewer can
//!   read as SBPL; the generated part only lists parameter references.
//! - Paths reach the profile only as `-D` parameters, never spliced into its text, and they are canonical
//!   (`/tmp` is `/private/tmp` on macOS), because Seatbelt matches resolved paths. The filesystem is asked
//!   through one seam, [`PathResolver`], so tests can stand in for macOS's symlinks.
//! - [`SeatbeltSandbox`] implements the [`uexec_ports::Sandbox`] port on every OS, but refuses to prepare a
//!   command where `sandbox-exec` cannot run (unless built for inspection): a missing sandbox is a typed
//!   error, never a silent fallback to no sandbox.
//!
//! Architecture invariant: this crate depends on `uexec-domain` and `uexec-ports` only, and it never spawns.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod paths;
mod profile;
mod sandbox;

pub use paths::{PathResolver, RealFs};
pub use profile::{SANDBOX_EXEC, SeatbeltLaunch, build_launch};
pub use sandbox::SeatbeltSandbox;
