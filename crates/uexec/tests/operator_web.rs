//! The operator's web page of `uexec mcp --listen` in a real headless browser (Debian's chromium driven by
//! playwright-core, pinned in tests/clients/package.json): tests/clients/operator.test.mjs. .ci/run installs
//! chromium and the npm packages; when either is missing the test fails, saying how to install it: it never skips.

use std::path::{Path, PathBuf};
use std::process::Command;

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients")
}

#[test]
#[allow(clippy::expect_used, clippy::panic)]
fn the_operator_page_shows_live_sessions_in_a_real_browser() {
    let chromium = std::env::var("UEXEC_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    assert!(Path::new(&chromium).exists(), "{chromium} is missing: apt-get install chromium (.ci/run does)");
    let installed = Command::new("node")
        .arg(clients_dir().join("installed.mjs"))
        .output()
        .expect("node is required for the browser test (apt-get install nodejs npm)");
    if !installed.status.success() {
        panic!("{}", String::from_utf8_lossy(&installed.stderr).trim());
    }
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("operator-web");
    std::fs::create_dir_all(&scratch).expect("create the scratch directory under target/");
    let status = Command::new("node")
        .arg("--test-reporter=spec")
        .arg(clients_dir().join("operator.test.mjs"))
        .env("UEXEC_BIN", env!("CARGO_BIN_EXE_uexec"))
        .env("UEXEC_CLIENTS_TMP", &scratch)
        .env("UEXEC_CHROMIUM", &chromium)
        .status()
        .expect("node is required for the browser test (apt-get install nodejs npm)");
    assert!(status.success(), "tests/clients/operator.test.mjs failed ({status}); see its output above");
}
