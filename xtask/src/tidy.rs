//! The tidy check: every Rust source file says what it is for in its first line (`//!`), and no stub
//! (`todo!`, `unimplemented!`) is left anywhere. Runs from `cargo xtask ci` and as a plain `#[test]`.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Problems found in the tree, one line each.
/// The variable's name as a quoted string literal (spelled in two halves, so this file does not hold it).
const TMPDIR_LITERAL: &str = concat!("\"TMP", "DIR\"");

/// The source files that read `$TMPDIR`: the engine's, from each command's environment, and the app's, once at
/// start.
const TMPDIR_READERS: [&str; 2] = ["crates/uexec-engine/src/placement.rs", "crates/uexec/src/settings.rs"];

/// The splitter's call, spelled in two halves like [`TMPDIR_LITERAL`].
const SPLITTER_CALL: &str = concat!("parse_plain", "_script(");

/// The files that may split a script: the domain's command module (which builds `ParsedCommand`, the one parse
/// of a call) and the fuzz body that tests the splitter itself.
const SPLITTERS: [&str; 2] = ["crates/uexec-domain/src/command.rs", "tests/src/fuzz.rs"];

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
            // A command is parsed once per call (`uexec_domain::command::ParsedCommand`).
            if line.contains(SPLITTER_CALL) && !SPLITTERS.contains(&rel.as_str()) {
                problems.push(format!(
                    "{rel}:{}: a script is split only by uexec_domain::command::ParsedCommand (parsed once a call)",
                    n + 1
                ));
            }
        }
    }
    Ok(problems)
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
        let splits = format!("//! Splits again.\nfn h() {{ {SPLITTER_CALL}\"ls\"); }}\n");
        fs::write(src.join("split.rs"), splits).unwrap();
        let problems = check(&dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(problems.len(), 4, "{problems:#?}");
        assert!(
            problems.iter().any(|p| p.contains("split.rs:2") && p.contains("parsed once")),
            "{problems:#?}"
        );
        assert!(
            problems.iter().any(|p| p.contains("tmp.rs:2") && p.contains("is read only in")),
            "{problems:#?}"
        );
    }
}
