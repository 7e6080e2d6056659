//! The tidy check: every Rust source file says what it is for in its first line (`//!`), no stub (`todo!`,
//! `unimplemented!`) is left anywhere, `$TMPDIR` is read in its two places only, a poisoned lock is
//! recovered, never skipped (see [`lock_problems`]), and the file lists of ARCHITECTURE.md (unsafe, environment
//! reads, the engine's files) match the tree. Runs from `cargo xtask ci` and as a plain `#[test]`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Problems found in the tree, one line each.
/// The variable's name as a quoted string literal (spelled in two halves, so this file does not hold it).
const TMPDIR_LITERAL: &str = concat!("\"TMP", "DIR\"");

/// The source files that read `$TMPDIR`: the engine's, from each command's environment, and the app's, once at
/// start.
const TMPDIR_READERS: [&str; 2] =
    ["crates/uexec-engine/src/placement.rs", "crates/uexec/src/settings/mod.rs"];

/// ARCHITECTURE.md's claims that this check holds: the paragraph that starts with each marker names (as
/// backticked paths) exactly the source files of `crates/*/src` where, outside test code, ...
const UNSAFE_MARKER: &str = "**Where `unsafe` is.**";
/// ... `unsafe` appears, and ...
const ENV_MARKER: &str = "**Which files read the environment.**";
/// ... the process environment is read (`std::env::var`, `var_os`, `vars`, `vars_os`, `EnvFilter`'s
/// default-environment constructors). The section `### \`xtask\`` names every command as `cargo xtask <name>`.
const XTASK_SECTION: &str = "### `xtask`";
/// The paragraph that names every source file of the engine (its code map, in the order of a call).
const ENGINE_MARKER: &str = "**The engine's files.**";

/// The splitter's call, spelled in two halves like [`TMPDIR_LITERAL`].
const SPLITTER_CALL: &str = concat!("parse_plain", "_script(");

/// The files that may split a script: the domain's command module (which builds `ParsedCommand`, the one parse
/// of a call) and the fuzz body that tests the splitter itself.
const SPLITTERS: [&str; 2] = ["crates/uexec-domain/src/command.rs", "tests/src/fuzz.rs"];

pub(crate) fn check(root: &Path) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut unsafe_files = BTreeSet::new();
    let mut env_files = BTreeSet::new();
    let mut files = Vec::new();
    for dir in ["crates", "xtask", "tests", "fuzz"] {
        collect_rs(&root.join(dir), &mut files)?;
    }
    let engine_files: BTreeSet<String> = files
        .iter()
        .filter_map(|file| file.strip_prefix(root).ok())
        .map(|rel| rel.to_string_lossy().into_owned())
        .filter(|rel| rel.starts_with("crates/uexec-engine/src/"))
        .collect();
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
            if names_an_issue(line) {
                problems.push(format!(
                    "{rel}:{}: a comment names an issue number (it goes stale: say what the code does)",
                    n + 1
                ));
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
        if is_module {
            problems.extend(lock_problems(&text).into_iter().map(|(line, p)| format!("{rel}:{line}: {p}")));
        }
        if is_module && rel.starts_with("crates/") {
            let (code, _) = crate::modules::without_tests(&crate::modules::strip_comments_and_strings(&text));
            if has_word(&code, "unsafe") {
                unsafe_files.insert(rel.clone());
            }
            const ENV_READS: [&str; 6] = [
                "env::var(",
                "env::var_os(",
                "env::vars(",
                "env::vars_os(",
                "from_default_env(",
                "try_from_default_env(",
            ];
            if ENV_READS.iter().any(|r| code.contains(r)) {
                env_files.insert(rel.clone());
            }
        }
    }
    let architecture = root.join("ARCHITECTURE.md");
    if architecture.exists() {
        let doc = fs::read_to_string(&architecture).context("reading ARCHITECTURE.md")?;
        for (marker, found, what) in [
            (UNSAFE_MARKER, &unsafe_files, "has `unsafe`"),
            (ENV_MARKER, &env_files, "reads the environment"),
            (ENGINE_MARKER, &engine_files, "is a source file of the engine"),
        ] {
            problems.extend(listed_files_problems(&doc, marker, found, what));
        }
        problems.extend(xtask_section_problems(&doc));
    }
    for entry in fs::read_dir(root.join("crates")).into_iter().flatten().flatten() {
        let (readme, manifest) = (entry.path().join("README.md"), entry.path().join("Cargo.toml"));
        if let (Ok(readme), Ok(manifest)) = (fs::read_to_string(&readme), fs::read_to_string(&manifest)) {
            let name = entry.file_name().to_string_lossy().into_owned();
            problems.extend(readme_dependency_problems(&name, &readme, &manifest));
        }
    }
    Ok(problems)
}

/// A crate's README names exactly its normal dependencies (target-specific ones included) in its
/// `Dependencies:` paragraph, each in backticks.
fn readme_dependency_problems(krate: &str, readme: &str, manifest: &str) -> Vec<String> {
    let Some(start) = readme.find("Dependencies:") else {
        return vec![format!("crates/{krate}/README.md: no `Dependencies:` paragraph")];
    };
    let paragraph = readme[start..].split("\n\n").next().unwrap_or_default();
    let paragraph = paragraph.split("License:").next().unwrap_or_default();
    let named: BTreeSet<&str> = paragraph.split('`').skip(1).step_by(2).collect();
    let mut declared = BTreeSet::new();
    let mut in_dependencies = false;
    for line in manifest.lines().map(str::trim) {
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']');
            let normal = |h: &str| h == "dependencies" || h.ends_with(".dependencies");
            in_dependencies = normal(header);
            if let Some((table, dep)) = header.rsplit_once('.')
                && normal(table)
            {
                declared.insert(dep.trim_matches('"').to_owned());
            }
        } else if in_dependencies
            && let Some(key) = line.split(['=', '.', ' ']).next().filter(|k| !k.is_empty())
        {
            declared.insert(key.to_owned());
        }
    }
    let mut problems = Vec::new();
    for dep in &declared {
        if !named.contains(dep.as_str()) {
            problems.push(format!("crates/{krate}/README.md: `Dependencies:` does not name `{dep}`"));
        }
    }
    for dep in named {
        if !declared.contains(dep) {
            problems
                .push(format!("crates/{krate}/README.md: `Dependencies:` names `{dep}`, not a dependency"));
        }
    }
    problems
}

/// True when the comment of `line` (from its `//`) names an issue by number (the word, a space, a digit).
fn names_an_issue(line: &str) -> bool {
    let Some(at) = line.find("//") else { return false };
    let comment = line[at..].to_ascii_lowercase();
    comment
        .match_indices("issue ")
        .any(|(i, w)| comment[i + w.len()..].starts_with(|c: char| c.is_ascii_digit()))
}

/// True when `word` occurs in `code` as a whole identifier.
fn has_word(code: &str, word: &str) -> bool {
    code.match_indices(word).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + word.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// The backticked `crates/...rs` paths of the paragraph of `doc` that starts with `marker`, compared with
/// `found`, the files where the claim's property holds.
fn listed_files_problems(doc: &str, marker: &str, found: &BTreeSet<String>, what: &str) -> Vec<String> {
    let Some(start) = doc.find(marker) else {
        return vec![format!("ARCHITECTURE.md: no paragraph starts with {marker}")];
    };
    let paragraph = doc[start..].split("\n\n").next().unwrap_or_default();
    let listed: BTreeSet<String> = paragraph
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("crates/") && s.ends_with(".rs"))
        .map(str::to_owned)
        .collect();
    let mut problems = Vec::new();
    for file in found.difference(&listed) {
        problems.push(format!("{file} {what} but ARCHITECTURE.md's {marker} paragraph does not name it"));
    }
    for file in listed.difference(found) {
        problems.push(format!("ARCHITECTURE.md's {marker} paragraph names {file}, which no longer {what}"));
    }
    problems
}

/// Every command of `cargo xtask` is named in ARCHITECTURE.md's xtask section.
fn xtask_section_problems(doc: &str) -> Vec<String> {
    let Some(start) = doc.find(XTASK_SECTION) else {
        return vec![format!("ARCHITECTURE.md has no {XTASK_SECTION} section")];
    };
    let section = &doc[start + XTASK_SECTION.len()..];
    let section =
        &section[..section.find("\n## ").or_else(|| section.find("\n### ")).unwrap_or(section.len())];
    crate::commands()
        .into_iter()
        .filter(|command| !section.contains(&format!("`cargo xtask {command}")))
        .map(|command| {
            format!("ARCHITECTURE.md's {XTASK_SECTION} section does not name `cargo xtask {command}`")
        })
        .collect()
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
        assert!(root.join("ARCHITECTURE.md").exists(), "the claims it holds are checked");
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

    #[test]
    fn a_file_list_claim_must_match_the_files() {
        let doc = "# A\n\n**Where `unsafe` is.** In `crates/a/src/x.rs` and\n`crates/a/src/gone.rs`.\n\nLater `crates/a/src/y.rs`.\n";
        let found: BTreeSet<String> = ["crates/a/src/x.rs", "crates/a/src/new.rs"].map(str::to_owned).into();
        let problems = listed_files_problems(doc, UNSAFE_MARKER, &found, "has `unsafe`");
        assert_eq!(problems.len(), 2, "{problems:#?}");
        assert!(problems[0].starts_with("crates/a/src/new.rs has `unsafe`"), "{problems:#?}");
        assert!(problems[1].contains("names crates/a/src/gone.rs, which no longer"), "{problems:#?}");
        let exact: BTreeSet<String> = ["crates/a/src/x.rs", "crates/a/src/gone.rs"].map(str::to_owned).into();
        assert_eq!(listed_files_problems(doc, UNSAFE_MARKER, &exact, "has `unsafe`"), Vec::<String>::new());
        assert_eq!(
            listed_files_problems(doc, ENV_MARKER, &exact, "reads").len(),
            1,
            "a missing paragraph fails"
        );
        assert!(has_word("let x = unsafe { f() };", "unsafe"));
        assert!(!has_word("#![deny(unsafe_code)]", "unsafe"));
    }

    #[test]
    fn issue_numbers_in_comments_are_reported() {
        assert!(names_an_issue(concat!("    /// Iss", "ue 22, class 4: a hidden location")));
        assert!(names_an_issue(concat!("let x = 1; // see is", "sue 7")));
        assert!(!names_an_issue("/// An issue with the terminal: 22 rows"));
        assert!(!names_an_issue(concat!("let s = \"is", "sue 5\";")));
    }

    #[test]
    fn a_readme_names_exactly_its_dependencies() {
        let manifest = "[package]\nname = \"a\"\n\n[dependencies]\nserde.workspace = true\nthiserror = \"2\"\n\n\
                        [target.'cfg(target_os = \"linux\")'.dependencies]\nlibc = { workspace = true }\n\n\
                        [dev-dependencies]\nproptest.workspace = true\n";
        let good = "# a\n\nDependencies: `serde`, `thiserror`; on Linux `libc`. License: MIT.\n";
        assert_eq!(readme_dependency_problems("a", good, manifest), Vec::<String>::new());
        let stale = "Dependencies: `serde`, `libc`, `anyhow`.\nLicense: MIT.\n";
        let problems = readme_dependency_problems("a", stale, manifest);
        assert_eq!(problems.len(), 2, "{problems:#?}");
        assert!(problems[0].contains("does not name `thiserror`") && problems[1].contains("`anyhow`, not"));
        assert_eq!(readme_dependency_problems("a", "no list", manifest).len(), 1);
    }

    #[test]
    fn the_xtask_section_names_every_command() {
        let all: String = crate::commands().iter().map(|c| format!("`cargo xtask {c}` ")).collect();
        assert_eq!(xtask_section_problems(&format!("### `xtask`\n{all}\n## Next\n")), Vec::<String>::new());
        let without_soak_fleet = all.replace("`cargo xtask soak-fleet` ", "");
        let problems = xtask_section_problems(&format!(
            "### `xtask`\n{without_soak_fleet}\n## Next\n`cargo xtask soak-fleet`"
        ));
        assert_eq!(problems.len(), 1, "{problems:#?}");
        assert!(problems[0].contains("soak-fleet"));
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
