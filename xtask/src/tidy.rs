//! The tidy check: every Rust source file says what it is for in its first line (`//!`), no stub (`todo!`,
//! `unimplemented!`) is left anywhere, `$TMPDIR` is read in its two places only, and a poisoned lock is
//! recovered, never skipped (see [`lock_problems`]). Runs from `cargo xtask ci` and as a plain `#[test]`.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Problems found in the tree, one line each.
/// The variable's name as a quoted string literal (spelled in two halves, so this file does not hold it).
const TMPDIR_LITERAL: &str = concat!("\"TMP", "DIR\"");

/// The source files that read `$TMPDIR`: the engine's, from each command's environment, and the app's, once at
/// start.
const TMPDIR_READERS: [&str; 2] = ["crates/uexec-engine/src/placement.rs", "crates/uexec/src/settings.rs"];

pub(crate) fn check(root: &Path) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut files = Vec::new();
    for dir in ["crates", "xtask", "tests", "fuzz"] {
        collect_rs(&root.join(dir), &mut files)?;
    }
    let stub_macros = [concat!("todo", "!("), concat!("unimplemented", "!(")];
    for file in files {
        let text = fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let rel = file.strip_prefix(root).unwrap_or(&file).display().to_string();
        let is_module = rel.contains("/src/");
        if is_module && !text.trim_start().starts_with("//!") {
            problems.push(format!("{rel}: a source file starts with a `//!` line saying what it is for"));
        }
        for (n, line) in text.lines().enumerate() {
            if stub_macros.iter().any(|m| line.contains(m)) {
                problems.push(format!("{rel}:{}: stub left in the code", n + 1));
            }
            // "Could a sandboxed command have written this?" has one answer (`uexec_domain::trust`), and
            // `$TMPDIR`, one of its facts, is read in one place per layer.
            if is_module && line.contains(TMPDIR_LITERAL) && !TMPDIR_READERS.contains(&rel.as_str()) {
                problems.push(format!(
                    "{rel}:{}: `$TMPDIR` is read only in {} (one fact of uexec_domain::trust)",
                    n + 1,
                    TMPDIR_READERS.join(" and ")
                ));
            }
        }
        if is_module {
            problems.extend(lock_problems(&text).into_iter().map(|(line, p)| format!("{rel}:{line}: {p}")));
        }
    }
    Ok(problems)
}

/// The one policy for poisoned locks: a `std::sync::Mutex` whose holder panicked is locked anyway
/// (`.lock().unwrap_or_else(PoisonError::into_inner)`, or a `lock` helper that does it), because the data
/// every lock of the workspace guards is consistent after each step; a poisoned lock is never skipped
/// (`.lock().ok()`, `if let Ok(..) = m.lock()`), which would drop a record or answer "nobody" silently.
/// Outside test code: every `.lock()` is followed by the recovery or by `.await` (tokio's lock), is a standard
/// stream's, or is in a file with its own `fn lock(&self)` helper; no `.lock()` anywhere is followed by `.ok()`,
/// `.is_ok()`, `.is_err()`, `.map(`, `.map_err(`, `?`, `else` or the `{` of a `match`/`if let`. Returns the
/// line and the problem of each offending call.
pub(crate) fn lock_problems(text: &str) -> Vec<(usize, String)> {
    const CALL: &str = ".lock()";
    const RECOVERED: [&str; 2] =
        [".unwrap_or_else(PoisonError::into_inner)", ".unwrap_or_else(std::sync::PoisonError::into_inner)"];
    const SKIPPING: [&str; 8] = [".ok()", ".is_ok()", ".is_err()", ".map(", ".map_err(", "?", "else", "{"];
    const STREAMS: [&str; 3] = ["stdout()", "stderr()", "stdin()"];
    let (code, _) = crate::modules::without_tests(&crate::modules::strip_comments_and_strings(text));
    let has_helper = code.contains("fn lock(&self)");
    let mut problems = Vec::new();
    for (at, _) in code.match_indices(CALL) {
        let line = code[..at].matches('\n').count() + 1;
        let after: String = code[at + CALL.len()..].chars().filter(|c| !c.is_whitespace()).take(60).collect();
        let before = code[..at].trim_end();
        if SKIPPING.iter().any(|s| after.starts_with(s)) {
            problems.push((
                line,
                "a poisoned lock is skipped: recover it with PoisonError::into_inner".to_owned(),
            ));
        } else if !(RECOVERED.iter().any(|r| after.starts_with(r))
            || after.starts_with(".await")
            || STREAMS.iter().any(|s| before.ends_with(s))
            || has_helper)
        {
            problems.push((
                line,
                "a std lock is taken with .lock().unwrap_or_else(PoisonError::into_inner) (or a lock helper)"
                    .to_owned(),
            ));
        }
    }
    problems
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let Ok(entries) = fs::read_dir(dir) else { return Ok(()) };
    for entry in entries {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') && name != "golden" {
                collect_rs(&path, out)?;
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
    Ok(())
}

pub(crate) fn run(root: &Path) -> Result<()> {
    let problems = check(root)?;
    if problems.is_empty() {
        eprintln!("tidy: ok");
        return Ok(());
    }
    for p in &problems {
        eprintln!("tidy: {p}");
    }
    bail!("{} tidy problem(s)", problems.len())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_is_tidy() {
        let root = crate::workspace_root().unwrap();
        let problems = check(&root).unwrap();
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn a_missing_module_doc_and_a_stub_are_reported() {
        let dir = std::env::temp_dir().join(format!("xtask-tidy-{}", std::process::id()));
        let src = dir.join("crates/demo/src");
        fs::create_dir_all(&src).unwrap();
        fs::write(src.join("lib.rs"), format!("fn f() {{ {}\"x\") }}\n", concat!("todo", "!("))).unwrap();
        let reads = format!("//! Reads it.\nfn g() {{ std::env::var_os({TMPDIR_LITERAL}); }}\n");
        fs::write(src.join("tmp.rs"), reads).unwrap();
        let problems = check(&dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(
            problems.iter().any(|p| p.contains("tmp.rs:2") && p.contains("is read only in")),
            "{problems:#?}"
        );
    }

    #[test]
    fn a_skipped_poisoned_lock_is_reported_and_a_recovered_one_is_not() {
        let recovered = [
            "let g = m.lock().unwrap_or_else(PoisonError::into_inner);",
            "m.lock()\n    .unwrap_or_else(std::sync::PoisonError::into_inner)\n    .push(1);",
            "let g = m.lock().await;",
            "let out = std::io::stdout().lock();",
            "// m.lock().ok() in a comment",
            "let s = \"m.lock().ok()\";",
            "#[cfg(test)]\nmod tests {\n    fn t() { m.lock().unwrap(); }\n}",
        ];
        for code in recovered {
            assert_eq!(lock_problems(code), vec![], "{code}");
        }
        let skipped = [
            "m.lock().ok()?.push(1);",
            "if let Ok(mut g) = m.lock() { g.push(1); }",
            "let Ok(g) = m.lock() else { return };",
            "match m.lock() { Ok(g) => g.len(), Err(_) => 0 }",
            "let g = m.lock()?;",
            "m.lock().map(|g| g.len())",
            "fn f() {\n    m.lock()\n        .is_ok();\n}",
            "let g = m.lock().unwrap_or_default();",
        ];
        for code in skipped {
            let problems = lock_problems(code);
            assert_eq!(problems.len(), 1, "{code}: {problems:?}");
        }
        assert_eq!(lock_problems("fn f() {\n    m.lock()\n        .is_ok();\n}")[0].0, 2);
        // A file with its own helper may call it; a skip is still a skip there.
        assert_eq!(
            lock_problems(
                "fn lock(&self) -> G { self.m.lock().unwrap_or_else(PoisonError::into_inner) }\nfn g(&self) { self.lock().push(1); }"
            ),
            vec![]
        );
        assert_eq!(
            lock_problems("fn lock(&self) -> G { todo() }\nfn g(&self) { self.m.lock().ok(); }").len(),
            1
        );
    }
}
