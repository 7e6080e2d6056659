//! Tools that bring their own Seatbelt sandbox cannot start it inside uexec's: `sandbox-exec` (or
//! `sandbox_init`) fails with `sandbox_apply: Operation not permitted` once a process is sandboxed. What each
//! tool's switch is, so a denial can name it.

/// The switch that turns off the own sandbox of the tool `argv` runs, when a nested sandbox is what failed
/// (its `output` says so) and the tool is one uexec knows; else `None`.
pub fn nested_sandbox_hint(argv: &[std::ffi::OsString], output: &[u8]) -> Option<&'static str> {
    let text = String::from_utf8_lossy(output).to_ascii_lowercase();
    let nested =
        text.contains("sandbox_apply") || text.contains("sandbox-exec: ") || text.contains("sandbox_init");
    if !nested {
        return None;
    }
    let words: Vec<String> = argv
        .iter()
        .map(|a| {
            let a = a.to_string_lossy();
            a.rsplit('/').next().unwrap_or(&a).to_ascii_lowercase()
        })
        .collect();
    let has = |w: &str| words.iter().any(|x| x == w);
    let joined = words.join(" ");
    if has("swift") || joined.contains("swift-build") {
        Some(
            "SwiftPM runs its manifests in a sandbox of its own, which cannot start inside uexec's: add \
              --disable-sandbox (swift build --disable-sandbox, swift test --disable-sandbox)",
        )
    } else if has("brew") {
        Some(
            "Homebrew builds from source under a sandbox of its own, which cannot start inside uexec's: install \
              the bottle (without --build-from-source) or run brew outside the sandbox",
        )
    } else if joined.contains("playwright") || joined.contains("chrom") || joined.contains("puppeteer") {
        Some(
            "Chromium's sandbox cannot start inside uexec's: launch it with --no-sandbox (Playwright: \
              chromiumSandbox: false; Puppeteer: args: ['--no-sandbox'])",
        )
    } else {
        Some(
            "a nested sandbox (sandbox-exec inside uexec's Seatbelt sandbox) cannot start: turn the tool's own \
              sandbox off, or run it outside the sandbox",
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::ffi::OsString;

    use super::*;

    fn argv(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn each_tool_gets_its_switch_and_only_for_a_nested_sandbox_failure() {
        let nested = b"sandbox-exec: sandbox_apply: Operation not permitted\n";
        assert!(
            nested_sandbox_hint(&argv(&["/usr/bin/swift", "build"]), nested)
                .unwrap()
                .contains("--disable-sandbox")
        );
        assert!(
            nested_sandbox_hint(&argv(&["brew", "install", "-s", "wget"]), nested)
                .unwrap()
                .contains("bottle")
        );
        assert!(
            nested_sandbox_hint(&argv(&["npx", "playwright", "test"]), nested)
                .unwrap()
                .contains("--no-sandbox")
        );
        assert!(nested_sandbox_hint(&argv(&["make"]), nested).unwrap().contains("nested sandbox"));
        // The twin: an ordinary denial names no nested sandbox.
        assert_eq!(nested_sandbox_hint(&argv(&["swift", "build"]), b"error: permission denied: x\n"), None);
    }
}
